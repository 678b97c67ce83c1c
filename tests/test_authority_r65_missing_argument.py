"""A call that lacks an argument a constraint needs is told what to do (review R65).

``call_not_covered`` for a missing argument said "argument X is required by CAP but missing from
the call" and no fix, where its sibling for a value outside the constraint says "ask for a grant
that covers it". It now ends with the fix; what the model is told of it shows no secret a grant
pins for an argument the framework injects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r60_held_capabilities import boss_gate, pay_and_other

from agentgate.authority import GrantRepository, Invocation, decide, issue
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE = (SigningKey(bytes([i]) * 32) for i in (95, 96))


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    yield from boss_gate(tmp_path)


def test_a_missing_constrained_argument_says_what_to_do(tmp_path: Path) -> None:
    """Review R65: the engine named the missing argument and the capability, and no fix."""
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    chain = issue(ROOT, ALICE.did, ["tool:pay?amount<=5"], ttl=3600, now=NOW)
    invocation = Invocation.sign(ALICE, chain, Call.tool("pay", {}), now=NOW + 1)
    (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1).findings
    assert (finding.kind.value, finding.code, finding.field) == (
        "scope_creep",
        "call_not_covered",
        "constraints.amount",
    )
    assert finding.message == (
        "argument amount is required by tool:pay?amount<=5 but missing from the call; pass amount, "
        "within the constraint, or ask for a grant that does not constrain amount"
    )


def test_the_model_is_told_the_fix_without_the_secret_the_grant_pins(gate: tuple[Gate, Any]) -> None:
    """Review R65: the model-visible text of the refusal carries the fix, and still no operand of
    the constraint on the argument LangGraph injects (``api_key``, pinned to a live key)."""
    made, boss = gate
    asked = AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 5}, "id": "c1"}])
    agent = create_gated_agent(
        made, name="boss", model=_AsWritten(turns=[asked, AIMessage(content="done")]), tools=pay_and_other()
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss)
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert told.content == (
        "agentgate refused tool:pay (invoke): argument api_key is required by "
        "tool:pay?api_key=<not shown: an injected argument> but missing from the call; pass api_key, "
        "within the constraint, or ask for a grant that does not constrain api_key; "
        "[scope_creep/call_not_covered]. Do not retry this call; choose another way or stop."
    )
    assert "sk-live" not in str(told.content) and boss.chain.token not in str(told.content)
