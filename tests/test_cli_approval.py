"""``agentgate approval``: a human lists open requests and signs one; the Gate takes the signature."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli

from agentgate.capabilities import Call
from agentgate.gate import Approval, Authorization, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
    expiry_s: 300
"""


class Setup:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
        for name, key in self.keys.items():
            save_key(key, path / "k", name)
        self.db = path / "agentgate.db"
        text = POLICY.format(**{n: k.did for n, k in self.keys.items()})
        self.gate = Gate(parse_policy(text, source="approval.yaml"), SQLiteStore(self.db))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def ask(self, amount: int = 500) -> Authorization:
        return self.gate.authorize(self.agent, Call.tool("refund", {"amount": amount}), call_id="call-1")

    def payload_file(self, auth: Authorization, name: str = "payload.json") -> Path:
        path = self.path / name
        path.write_text(json.dumps(auth.approval_payload()))
        return path


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


@pytest.mark.usefixtures("no_default_store")
def test_a_signed_approval_from_the_cli_lets_the_call_run(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = setup.ask()
    assert asked.needs_approval
    code, out, _ = cli(capsys, "approval", "list", "--store", str(setup.db), "--json")
    assert code == 0
    (listed,) = json.loads(out)
    assert listed["id"] == asked.request["id"] and listed["approved_by"] == [] and listed["quorum"] == 1

    out_file = setup.path / "approval.json"
    code, _, err = cli(
        capsys, "approval", "sign", str(setup.payload_file(asked)), "--as", str(setup.path / "k" / "lead.key"),
        "--out", str(out_file),
    )  # fmt: skip
    assert code == 0, err
    assert "tool:refund" in err and '"amount": 500' in err and "agent" in err  # what the human saw
    approval = Approval.parse(json.loads(out_file.read_text()))
    assert approval is not None and approval.approver == setup.keys["lead"].did
    resumed = setup.gate.authorize(
        setup.agent, Call.tool("refund", {"amount": 500}), call_id="call-1", approval=approval
    )
    assert resumed.allowed
    code, out, _ = cli(capsys, "approval", "list", "--store", str(setup.db))
    assert (code, out) == (0, "no open approval requests\n")


@pytest.mark.usefixtures("no_default_store")
def test_the_approval_is_for_that_call_only(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    asked = setup.ask()
    code, out, _ = cli(
        capsys, "approval", "sign", str(setup.payload_file(asked)), "--as", str(setup.path / "k" / "lead.key")
    )
    assert code == 0
    approval = Approval.parse(json.loads(out))
    other = setup.gate.authorize(
        setup.agent, Call.tool("refund", {"amount": 900}), call_id="call-1", approval=approval
    )
    assert not other.allowed


def test_the_requester_cannot_sign_its_own_request(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    asked = setup.ask()
    code, out, err = cli(
        capsys,
        "approval",
        "sign",
        str(setup.payload_file(asked)),
        "--as",
        str(setup.path / "k" / "agent.key"),
    )
    assert (code, out) == (1, "") and "must not be the requester" in err


def test_an_expired_request_is_not_signed(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    payload = setup.ask().approval_payload()
    payload["request"]["expires_at"] = 1_000_000_000
    path = setup.path / "old.json"
    path.write_text(json.dumps(payload))
    code, out, err = cli(capsys, "approval", "sign", str(path), "--as", str(setup.path / "k" / "lead.key"))
    assert (code, out) == (1, "") and "expired" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"request": {"id": "x"}}', "call_hash"),
    ],
)
def test_malformed_payloads_exit_2_with_one_line(
    setup: Setup, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = setup.path / "bad.json"
    path.write_text(content)
    code, out, err = cli(capsys, "approval", "sign", str(path), "--as", str(setup.path / "k" / "lead.key"))
    assert (code, out) == (2, "") and message in err and "Traceback" not in err and err.count("\n") == 1


def test_a_missing_payload_or_key_file_exits_2(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(
        capsys, "approval", "sign", str(setup.path / "nope.json"), "--as", str(setup.path / "k" / "lead.key")
    )
    assert code == 2 and "cannot read" in err
    payload = setup.payload_file(setup.ask())
    code, _, err = cli(capsys, "approval", "sign", str(payload), "--as", str(setup.path / "k" / "nope.key"))
    assert code == 2 and "Traceback" not in err


def test_open_requests_are_pending_and_unexpired_with_their_votes(store: Store) -> None:
    approvals = ApprovalStore(store)
    now = time.time()
    waiting = approvals.request("h1", "did:key:requester", now + 300, quorum=2)
    approvals.approve(waiting, "did:key:one")
    done = approvals.request("h2", "did:key:requester", now + 300)
    approvals.approve(done, "did:key:one")
    approvals.request("h3", "did:key:requester", now - 1)  # expired
    (record,) = approvals.open_records()
    votes = approvals.votes(record.id)[0]
    assert (record.id, record.quorum, votes) == (waiting, 2, ("did:key:one",))
