"""``Gate.approve`` given LangGraph's ``Interrupt`` itself, found by following docs/quickstart.md
as a developer new to agentgate (review R71). The desk agent, its policy and its paused run are
tests/test_gate_r71_approve_early.py's."""

from __future__ import annotations

import pytest
from langgraph.types import Command
from test_gate_r71_approve_early import _paused_state
from test_gate_r71_approve_early import gate as gate  # the fixture
from test_gate_r71_approve_early import keys as keys  # the fixture

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.keys import SigningKey


def test_approve_given_the_interrupt_itself_says_to_pass_its_value(
    gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R71: ``gate.approve(state["__interrupt__"][0], key)``, the interrupt rather than its
    ``.value`` (the first thing a developer writes), was refused as "the approval payload must be
    the interrupt payload (a mapping), got a Interrupt": it said what was wrong but not what to
    pass. It now names the fix, ``.value``, and signs nothing; the payload itself still signs and
    the resumed run refunds."""
    agent, identity, config, state = _paused_state(gate, keys)
    pending = state["__interrupt__"][0]
    with pytest.raises(InputError) as refused:
        gate.approve(pending, keys["alice"])
    message = str(refused.value)
    assert "Interrupt" in message and ".value" in message, message
    approval = gate.approve(pending.value, keys["alice"])
    state = agent.invoke(Command(resume=approval), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"
