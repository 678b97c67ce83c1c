"""``Gate.approve`` refuses at once, naming the rule and what to do, an approval of a request
that expired, of one already used, and a second yes of an approver whose vote a quorum already
counts: until review R72 it signed all three, though none could ever count (real Gate, real
SQLite store, the payloads of real LangGraph interrupts)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from test_gate_r71_approve_early import POLICY, _paused, _policy

from agentgate.errors import InputError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("root", "desk", "alice", "bob")}


@pytest.fixture
def gate(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    opened = Gate(_policy(keys, "alice"), SQLiteStore(tmp_path / "agentgate.db"))
    yield opened
    opened.close()


@pytest.fixture
def two_of(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    """The refunds gate asking alice and bob both (a quorum of two)."""
    text = POLICY.replace("approvers: [APPROVERS]}", "approvers: [alice, bob], quorum: 2}")
    for name, key in keys.items():
        text = text.replace(f'"{name.upper()}"', key.did)
    opened = Gate(parse_policy(text, source="desk.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield opened
    opened.close()


def _expire(gate: Gate, payload: dict[str, Any]) -> None:
    """The request of ``payload`` past its deadline, as the store would hold it once its time passed."""
    with gate.store.transaction() as tx:
        tx.execute(
            "UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, payload["request"]["id"])
        )


def test_an_expired_request_is_refused_and_the_run_asks_again(
    gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R72: ``gate.approve`` of a request past its deadline returned an approval that the
    store can never count (a late yes never flips a timed-out request). It now raises
    ``InputError`` saying it expired and how to have the call asked again: the run invoked again
    without a resume value asks under a new request, and alice's approval of that one refunds."""
    agent, identity, config, payload = _paused(gate, keys)
    _expire(gate, payload)
    with pytest.raises(InputError) as refused:
        gate.approve(payload, keys["alice"])
    message = str(refused.value)
    assert "expired at" in message and payload["request"]["id"] in message, message
    assert "invoke(None" in message and "not signed" in message, message
    again = agent.invoke(None, config, context=identity)["__interrupt__"][0].value
    assert again["request"]["id"] != payload["request"]["id"]
    state = agent.invoke(Command(resume=gate.approve(again, keys["alice"])), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"


def test_a_used_request_is_refused(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R72: once alice's approval let the refund run (the request consumed, single use),
    ``gate.approve`` of the same payload signed again, an approval that no run can count (a replay
    of a used approval is refused). Refused now, naming the rule and the allow that used it."""
    agent, identity, config, payload = _paused(gate, keys)
    state = agent.invoke(Command(resume=gate.approve(payload, keys["alice"])), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"
    with pytest.raises(InputError) as refused:
        gate.approve(payload, keys["alice"])
    message = str(refused.value)
    assert "already used" in message and "single use" in message, message
    assert Approval.sign(payload, keys["alice"]).approver == keys["alice"].did  # the low-level signer


def test_a_second_yes_of_the_same_approver_is_refused(two_of: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R72: under a quorum of two, alice's vote counted, the run asked the next approver;
    ``gate.approve`` of that payload with alice's key again signed a yes the quorum never counts
    twice (the run asked again, "already approved"). Refused now, naming who may still sign;
    bob's yes then completes the quorum and the refund runs."""
    agent, identity, config, payload = _paused(two_of, keys)
    state = agent.invoke(Command(resume=two_of.approve(payload, keys["alice"])), config, context=identity)
    second = state["__interrupt__"][0].value
    assert second["request"]["approved_by"] == [keys["alice"].did]
    with pytest.raises(InputError) as refused:
        two_of.approve(second, keys["alice"])
    message = str(refused.value)
    assert "has already approved" in message and "counts each approver once" in message, message
    assert "(bob)" in message, message
    state = agent.invoke(Command(resume=two_of.approve(second, keys["bob"])), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"


def test_a_request_just_within_its_deadline_is_signed(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R72: the boundary is the store's (a request counts while ``expires_at > now``): one
    a minute from its deadline is signed, and the approval refunds."""
    agent, identity, config, payload = _paused(gate, keys)
    with gate.store.transaction() as tx:
        tx.execute(
            "UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() + 60, payload["request"]["id"])
        )
    state = agent.invoke(Command(resume=gate.approve(payload, keys["alice"])), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"
