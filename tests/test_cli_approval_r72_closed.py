"""``agentgate approval sign --store`` refuses, exit 1, a request the store holds as closed
(declined, superseded, void), used, or already approved by the signer: until review R72 it
checked what the payload shows against the store's request but not where the request stands,
and signed approvals that could never count (the CLI's main run with argv, a real Gate on a
SQLite file)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import POLICY

from agentgate.capabilities import Call
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

TWO = POLICY.replace(
    '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n',
    '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n  lead2: {{kind: human, did: "{lead2}"}}\n',
).replace("approvers: [lead]\n", "approvers: [lead, lead2]\n    quorum: 2\n")


class _Rig:
    def __init__(self, path: Path, text: str) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "lead2")}
        for name in ("lead", "lead2"):
            save_key(self.keys[name], path / "k", name)
        self.path = path
        self.gate = Gate(
            parse_policy(text.format(**{n: k.did for n, k in self.keys.items()})), SQLiteStore(path / "s.db")
        )
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")
        self.call = Call.tool("refund", {"amount": 800})
        self.asked = self.gate.authorize(self.agent, self.call, call_id="call-1")
        assert self.asked.needs_approval

    def sign(
        self, capsys: pytest.CaptureFixture[str], payload: dict[str, Any], who: str
    ) -> tuple[int, str, str]:
        (self.path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
        return cli(
            capsys, "approval", "sign", str(self.path / "p.json"), "--as", str(self.path / "k" / f"{who}.key"),
            "--store", str(self.path / "s.db"),
        )  # fmt: skip


@pytest.fixture
def one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Rig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    rig = _Rig(
        tmp_path,
        POLICY.replace("approvers: [lead]", "approvers: [lead, lead2]").replace(
            '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n',
            '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n  lead2: {{kind: human, did: "{lead2}"}}\n',
        ),
    )
    yield rig
    rig.gate.close()


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Rig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    rig = _Rig(tmp_path, TWO)
    yield rig
    rig.gate.close()


def test_a_declined_request_is_refused(one: _Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: a request declined (the run resumed with a "no") was signed with --store, its
    payload matching the store's request field for field. Refused now, exit 1, saying it was
    declined and nothing waits for it; nothing on standard output."""
    payload = one.asked.approval_payload()
    one.gate.decline(one.asked, "not today")
    code, out, err = one.sign(capsys, payload, "lead")
    assert code == 1 and out == "", err
    assert "refused" in err and "declined" in err, err


def test_a_used_request_is_refused(one: _Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: once lead's approval let the refund run (the request consumed), lead2 signing
    the same payload with --store got an approval no run can count. Refused, exit 1."""
    payload = one.asked.approval_payload()
    approval = Approval.parse(one.gate.approve(payload, one.keys["lead"]))
    assert one.gate.authorize(one.agent, one.call, call_id="call-1", approval=approval).allowed
    code, out, err = one.sign(capsys, payload, "lead2")
    assert code == 1 and out == "", err
    assert "already used" in err, err


def test_a_second_yes_of_the_same_approver_is_refused(two: _Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: under a quorum of two, with lead's vote counted, lead signing again with --store
    got a yes the quorum never counts twice. Refused, exit 1; lead2 signs (exit 0)."""
    payload = two.asked.approval_payload()
    approval = Approval.parse(two.gate.approve(payload, two.keys["lead"]))
    again = two.gate.authorize(two.agent, two.call, call_id="call-1", approval=approval)
    assert again.needs_approval
    code, out, err = two.sign(capsys, again.approval_payload(), "lead")
    assert code == 1 and out == "", err
    assert "has already approved" in err, err
    code, out, err = two.sign(capsys, again.approval_payload(), "lead2")
    assert code == 0, err


def test_a_request_whose_grant_was_revoked_is_refused(one: _Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: a request still pending in the table whose call's grant was revoked by a writer
    other than a Gate (void: no yes of it ever counts) was signed with --store. Refused, exit 1,
    naming the grant."""
    payload = one.asked.approval_payload()
    one.gate.grants.revoke(one.agent.grant_id, now=int(time.time()))
    assert one.gate.approvals.get(payload["request"]["id"]).state == "pending"
    code, out, err = one.sign(capsys, payload, "lead")
    assert code == 1 and out == "", err
    assert "void" in err and one.agent.grant_id in err, err
