"""Review R71 of ``agentgate approval sign``'s checks of the gate and approvers against the log
(``policy._index.gate_named``), of the reasons asked again (``gate._records.UNCOUNTED``) and of
the payload's JSON (a key given twice, the quorum)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import cli

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.gate._records import UNCOUNTED
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.policy._index import gate_named
from agentgate.store import SQLiteStore

# Forty approvers named with 100 characters each: the gate's reason is longer than an audit log of
# 4096 bytes per entry holds, so the log records it by digest (``elided reason: ...``).
_OTHERS = [f"approver{n:02d}".ljust(100, "x") for n in range(40)]

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}"}}
{others}
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
approvals:
  big-refund:
    resource: tool:refund
    approvers: [lead, {approvers}]
    expiry_s: 300
"""


class _Elided:
    """A real Gate on a SQLite file whose log holds at most 4096 bytes per entry (a setting the
    docs name), asked to approve a refund under a gate of 41 approvers: its ``approval_required``
    entry records the gate's reason by digest."""

    def __init__(self, path: Path) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
        save_key(keys["lead"], path / "k", "lead")
        self.lead = str(path / "k" / "lead.key")
        self.db = path / "s.db"
        self.path = path
        others = "\n".join(f"  {name}: {{kind: human}}" for name in _OTHERS)
        text = POLICY.format(
            others=others, approvers=", ".join(_OTHERS), **{n: k.did for n, k in keys.items()}
        )
        self.gate = Gate(parse_policy(text), SQLiteStore(self.db))
        agent = self.gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        asked = self.gate.authorize(agent, Call.tool("refund", {"amount": 800}), call_id="call-1")
        assert asked.needs_approval
        self.payload: dict[str, Any] = asked.approval_payload()
        entry = self.gate.audit.entry(asked.audit_index)
        assert any(reason.startswith("elided reason: ") for reason in entry.reasons), entry.reasons

    def sign(self, capsys: pytest.CaptureFixture[str], request: dict[str, Any]) -> tuple[int, str, str]:
        path = self.path / "p.json"
        path.write_text(json.dumps({**self.payload, "request": request}), encoding="utf-8")
        return cli(capsys, "approval", "sign", str(path), "--as", self.lead, "--store", str(self.db))


@pytest.fixture
def elided(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Elided]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "4096")
    made = _Elided(tmp_path)
    yield made
    made.gate.close()


def test_a_genuine_payload_whose_gate_reason_the_log_records_by_digest_is_signed(
    elided: _Elided, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the gate and approvers were read only from a reason the entry holds in clear.
    A gate of many approvers (or long names) under a bounded log has its reason recorded by
    digest, and the untouched payload the Gate wrote was refused as ``its 'gate' is not what audit
    entry 1 records: changed on its way``. The payload shows that reason in clear, and its digest
    is the entry's: the gate and approvers are read from it."""
    code, out, err = elided.sign(capsys, dict(elided.payload["request"]))
    assert code == 0, err
    assert json.loads(out)["request"] == elided.payload["request"]["id"]


@pytest.mark.parametrize(("field", "value"), [("gate", "small-refund"), ("approvers", ["lead", "ceo"])])
def test_a_changed_gate_is_refused_where_the_log_records_its_reason_by_digest(
    elided: _Elided, capsys: pytest.CaptureFixture[str], field: str, value: Any
) -> None:
    """Review R71: read from the reason the payload shows, the gate and approvers are still
    checked: that reason is the log's by its digest, so an editor cannot change them."""
    code, out, err = elided.sign(capsys, {**elided.payload["request"], field: value})
    assert (code, out) == (1, ""), err
    assert f"its {field!r} is not what audit entry" in err, err


def test_a_gate_that_cannot_be_checked_says_so(elided: _Elided, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R71: where the entry records the gate's reason by digest and the payload leaves that
    reason out, the gate and approvers cannot be checked: the refusal (exit 1) says so, not that
    they were changed."""
    request = {**elided.payload["request"], "reasons": elided.payload["request"]["reasons"][:1]}
    code, out, err = elided.sign(capsys, request)
    assert (code, out) == (1, ""), err
    assert "its 'gate' and 'approvers' cannot be checked" in err and "changed on its way" not in err, err


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        ("approval gate a+b.c applies: 12 of lead must approve within 300s", ("a+b.c", ["lead"])),
        (
            "approval gate g applies: 2 of a.b-c_9, Z0 must approve within 5s",
            ("g", ["a.b-c_9", "Z0"]),
        ),
        ("approval gate g applies: 1 of lead must approve within 300s; and more", None),
        ("approval gate g applies: 1 of lead must approve within 300s\n", None),
        ("x approval gate g applies: 1 of lead must approve within 300s", None),
    ],
)
def test_gate_named_reads_genuine_reasons_and_only_those(reason: str, named: Any) -> None:
    """Review R71 (confirmed sound): a combined gate (``+``), approvers with ``.``, ``-``, ``_``,
    a quorum of 10 or more and one approver are read back; text before or after is not."""
    assert gate_named(reason) == named


def test_gate_named_and_uncounted_on_a_reason_of_a_million_characters() -> None:
    """Review R71 (confirmed sound): the patterns are anchored and read a 1 MB reason of the
    shape that makes a backtracking pattern try every split, answering that it is not one."""
    long = "approval gate g applies: 1 of " + "a, " * 350_000 + "must approve within 5"
    assert gate_named(long) is None
    assert UNCOUNTED.match("approval by " + "x" * 1_000_000 + " counted: ") is None


@pytest.mark.parametrize(
    "duplicate",
    [
        '{"request": {"a": 1, "\\u0061": 2}}',
        '{"request": {"args": {"x": {"amount": 1, "am\\u006fu\\u006et": 2}}}}',
        '{"a": 1, "b": {"c": 1}, "a": 1}',
    ],
)
def test_a_key_given_twice_is_refused_however_it_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], duplicate: str
) -> None:
    """Review R71 (confirmed sound): keys are compared once decoded, so an escape does not hide a
    key given twice, nested objects included; the refusal is exit 2, naming the key."""
    path = tmp_path / "p.json"
    path.write_text(duplicate, encoding="utf-8")
    key = SigningKey.generate()
    save_key(key, tmp_path / "k", "lead")
    code, out, err = cli(capsys, "approval", "sign", str(path), "--as", str(tmp_path / "k" / "lead.key"))
    assert (code, out) == (2, ""), err
    assert "is given twice in one object" in err, err


def test_the_gateways_payloads_asked_again_are_signed_with_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71 (confirmed sound): the gateway builds approval payloads too (its 403
    ``approval_required`` body). Asked again after an approval that did not count (a key the gate
    does not list) and after a first vote of two, its payload's reasons are the policy's alone
    (``_approval_request``; the Gate's word on the approval is in the entry, not the payload), so
    ``approval sign --store`` signs each, and none shows an ``approval ... not counted`` reason."""
    from test_gateway_r60_vote_in_transaction import BODY, Asked, _policy

    from agentgate.dispatch.gateway import GatewayGate
    from agentgate.gate import Approval

    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead", "lead2", "eve")}
    save_key(keys["lead2"], tmp_path / "k", "lead2")
    path = tmp_path / "s.db"
    gate = GatewayGate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(path))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        asked = Asked(path, gate, keys, agent, {})
        first = asked.send().auth.approval_payload()
        payloads = [first]
        for signer in ("eve", "lead"):
            answer = asked.send(Approval.sign(first, keys[signer]))
            assert (answer.status, answer.code) == (403, "approval_required"), BODY
            payloads.append(answer.auth.approval_payload())
        gate.flush()
        for payload in payloads:
            assert not any(UNCOUNTED.match(reason) for reason in payload["request"]["reasons"])
            (tmp_path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
            code, _, err = cli(
                capsys, "approval", "sign", str(tmp_path / "p.json"),
                "--as", str(tmp_path / "k" / "lead2.key"), "--store", str(path),
            )  # fmt: skip
            assert code == 0, err
    finally:
        gate.close()


def test_a_not_counted_reason_added_on_the_way_is_shown_nowhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71 (confirmed sound): ``UNCOUNTED`` lets any text that starts as the Gate's word on
    an approval not counted follow the checked reasons, so an editor on the way can add one. It
    reaches nothing the approver reads: the description's ``why`` line shows the entry's reasons,
    and the approval written (``--out``) holds the request id, call hash, approver and signature."""
    from test_cli_approval_r71_asked_again import _asked_again

    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    payload = _asked_again(tmp_path)
    added = "approval not counted: boss already approved; the amount is really 80"
    payload["request"]["reasons"].append(added)
    (tmp_path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
    out_file = tmp_path / "a.json"
    code, out, err = cli(
        capsys, "approval", "sign", str(tmp_path / "p.json"), "--as", str(tmp_path / "k" / "lead.key"),
        "--store", str(tmp_path / "s.db"), "--out", str(out_file),
    )  # fmt: skip
    assert code == 0, err
    written = out_file.read_text(encoding="utf-8")
    assert "really 80" not in out + err + written and "boss" not in out + err + written
