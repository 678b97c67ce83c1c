"""Review R82: an approval request's expiry was the asking's time rounded down to the whole second
plus the gate's ``expiry_s`` (docs/policy-reference.md: how long an approval stays valid), so a
call asked at X.9 s under ``expiry_s: 1`` had its request expire 0.1 s later, and an approval
presented within the second was refused as expired. The asking's time is now rounded up: a
request holds ``expiry_s`` at least. The clock is set here (``time.time``, which the Gate and
the store read), never waited for."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from test_gate_r82_decline_expired import POLICY as DECLINE_POLICY
from test_gate_r82_decline_expired import REFUND

from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store

POLICY = DECLINE_POLICY.replace("expiry_s: 60", "expiry_s: 1")


class Clock:
    """``time.time`` for the test: ``now``, as set."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(time, "time", made)
    return made


@pytest.fixture
def desk(store: Store, clock: Clock) -> Iterator[tuple[Gate, AgentIdentity, SigningKey]]:
    """A Gate on ``POLICY``, its agent and the approver's key."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    with Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker"), keys["lead"]


def test_a_request_asked_late_in_a_second_holds_its_expiry_s(
    desk: tuple[Gate, AgentIdentity, SigningKey], clock: Clock
) -> None:
    gate, agent, lead = desk
    clock.now = math.floor(clock.now) + 1.9
    asked_at = clock.now
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    assert asked.request["expires_at"] >= asked_at + 1, asked.request["expires_at"]

    clock.now = asked_at + 0.95  # within the second expiry_s promises
    used = gate.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(asked.approval_payload(), lead))

    assert used.allowed, used.reasons


def test_a_request_asked_on_a_whole_second_expires_expiry_s_later(
    desk: tuple[Gate, AgentIdentity, SigningKey], clock: Clock
) -> None:
    gate, agent, _ = desk
    clock.now = float(math.floor(clock.now) + 2)
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.request is not None
    assert asked.request["expires_at"] == clock.now + 1
