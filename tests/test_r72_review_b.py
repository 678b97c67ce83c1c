"""Review R72 (second reading, helper r72-rev-b) of ``Gate.approve``'s refusals of an approval
that can no longer count and of ``agentgate approval sign --store``'s (real Gate, real SQLite
store, real LangGraph interrupts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _approval_rig import ApprovalRig
from langgraph.types import Command
from test_cli_approval_r72_closed import TWO
from test_gate_r71_approve_early import POLICY, _paused

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

_CAROL = (
    '  bob: {kind: human, did: "BOB", roles: [lead]}\n  carol: {kind: human, did: "CAROL", roles: [lead]}\n'
)


def _gate(path: Path, keys: dict[str, SigningKey], approvers: str) -> Gate:
    """A Gate on the store at ``path`` whose refunds gate is ``approvers`` (the policy's text)."""
    text = POLICY.replace('  bob: {kind: human, did: "BOB", roles: [lead]}\n', _CAROL)
    text = text.replace("approvers: [APPROVERS]}", f"{approvers}}}")
    for name, key in keys.items():
        text = text.replace(f'"{name.upper()}"', key.did)
    return Gate(parse_policy(text, source="desk.yaml"), SQLiteStore(path))


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("root", "desk", "alice", "bob", "carol")}


@pytest.fixture
def three_of(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    opened = _gate(tmp_path / "agentgate.db", keys, "approvers: [alice, bob, carol], quorum: 3")
    yield opened
    opened.close()


def _voted(gate: Gate, keys: dict[str, SigningKey], *names: str) -> tuple[Any, Any, dict[str, Any], Any]:
    """The desk agent paused on a refund, each of ``names`` having approved it in turn; the
    payload it asks with then."""
    agent, identity, config, payload = _paused(gate, keys)
    for name in names:
        state = agent.invoke(Command(resume=gate.approve(payload, keys[name])), config, context=identity)
        payload = state["__interrupt__"][0].value
    return agent, identity, config, payload


def test_a_repeated_yes_counts_only_the_votes_the_policy_counts(
    three_of: Gate, keys: dict[str, SigningKey], tmp_path: Path
) -> None:
    """Review R72: alice and carol voted under a quorum of three; the policy then dropped carol
    and asks two of alice and bob. ``gate.approve`` of alice's second yes is refused (right: a
    quorum counts her once), but it said "(2 of 3 votes in)": carol's vote, which the policy no
    longer counts, and the quorum the request was last counted against, where the resumed run
    counts one vote of two: the message now says so."""
    *_, payload = _voted(three_of, keys, "alice", "carol")
    assert payload["request"]["approved_by"] == sorted([keys["alice"].did, keys["carol"].did])
    changed = _gate(tmp_path / "agentgate.db", keys, "approvers: [alice, bob], quorum: 2")
    try:
        with pytest.raises(InputError) as refused:
            changed.approve(payload, keys["alice"])
        message = str(refused.value)
        assert "has already approved" in message, message
        assert "(1 of 2 votes in" in message, message
        assert "(bob)" in message, message
    finally:
        changed.close()


def test_a_repeated_yes_is_signed_where_a_lowered_quorum_counts_it(
    keys: dict[str, SigningKey], tmp_path: Path
) -> None:
    """Review R72: alice's vote was in on a refund asked under a quorum of two; the policy then
    lowered it to one. Her vote alone now meets it, so an approval of hers presented again counts
    (the run's vote is refused as a repeat, and the use of the request, counted under the policy
    in force, lets the refund run). ``gate.approve`` refused to sign it ("has already approved"),
    an approval that would have counted. It now signs it, and the call it approves is allowed."""
    path = tmp_path / "agentgate.db"
    two = _gate(path, keys, "approvers: [alice, bob], quorum: 2")
    try:
        identity = two.issue(keys["root"], name="desk", key=keys["desk"], role="desk")
        call = Call.tool("payments.refund", {"order_id": "O-1", "amount": 800})
        asked = two.authorize(identity, call, call_id="c1")
        payload = asked.approval_payload()
        first = Approval.parse(two.approve(payload, keys["alice"]))
        assert two.authorize(identity, call, call_id="c1", approval=first).needs_approval
    finally:
        two.close()
    one = _gate(path, keys, "approvers: [alice, bob], quorum: 1")
    try:
        again = Approval.parse(one.approve(payload, keys["alice"]))
        assert one.authorize(identity, call, call_id="c1", approval=again).allowed
    finally:
        one.close()


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApprovalRig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    opened = ApprovalRig(tmp_path, TWO)
    yield opened
    opened.gate.close()


def test_cli_signs_a_repeated_yes_on_a_request_its_quorum_approved(
    rig: ApprovalRig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: under a quorum of two, lead's vote and lead2's are in (lead2's counted by
    another process, whose allow has not used the request yet: the store holds it approved).
    Any approval of one of its approvers now uses it, lead's again too (the run refuses the
    vote as a repeat and counts the quorum met). ``approval sign --store`` refused lead's
    ("has already approved", exit 1), an approval that would have counted. It signs it now
    (exit 0), and the call it approves is allowed."""
    payload = rig.asked.approval_payload()
    first = Approval.parse(rig.gate.approve(payload, rig.keys["lead"]))
    again = rig.gate.authorize(rig.agent, rig.call, call_id="call-1", approval=first)
    assert again.needs_approval
    rig.gate.approvals.approve(payload["request"]["id"], rig.keys["lead2"].did)
    assert rig.gate.approvals.get(payload["request"]["id"]).state == "approved"
    code, out, err = rig.sign(capsys, again.approval_payload(), "lead")
    assert code == 0, err
    signed = Approval.parse(json.loads(out))
    assert rig.gate.authorize(rig.agent, rig.call, call_id="call-1", approval=signed).allowed


def test_the_expired_advice_keeps_the_runs_identity(keys: dict[str, SigningKey], tmp_path: Path) -> None:
    """Review R72: ``gate.approve`` of an expired request said to invoke the run again as
    ``graph.invoke(None, config)``. Followed as written on the gated agent of
    docs/quickstart.md, the run carries no identity, and the call is refused for good ("the run
    carries no agent identity ... Do not retry this call"), where the advice promised it asked
    again. The message now says to pass the run's context too, and so invoked the run asks the
    call again under a new request."""
    gate = _gate(tmp_path / "agentgate.db", keys, "approvers: [alice]")
    try:
        agent, identity, config, payload = _paused(gate, keys)
        with gate.store.transaction() as tx:
            tx.execute("UPDATE approvals SET expires_at = 1 WHERE id = ?", (payload["request"]["id"],))
        with pytest.raises(InputError) as refused:
            gate.approve(payload, keys["alice"])
        message = str(refused.value)
        assert "graph.invoke(None, config, context=" in message, message
        again = agent.invoke(None, config, context=identity)["__interrupt__"][0].value
        assert again["request"]["id"] != payload["request"]["id"]
    finally:
        gate.close()
