"""Review R60, second pass: the ``Denied`` that ``enforce=True`` raises (``Gate.explain_redacted``)
says what the model is told of a refusal: the bound the call crossed, without the list of every
capability the grant holds. The audit entry and the ``Decision`` on the ``Denied`` keep it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import InjectedToolArg, StructuredTool
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r60_held_capabilities import boss_gate, pay_and_other
from test_langgraph_r60_injected_secrets import POLICY as INJECTED_POLICY
from test_langgraph_r60_injected_secrets import SECRET, _Injecting

from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HELD = "(it holds tool:pay?api_key=sk-live-SECRET, model:scripted)"


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    yield from boss_gate(tmp_path)


def test_an_enforced_refusal_does_not_list_what_the_grant_holds(gate: tuple[Gate, Any]) -> None:
    """Review R60: under enforce=True the Denied's text still listed every capability held, another tool's pinned key included, where the model's refusal no longer did."""
    made, boss = gate

    tools = pay_and_other()
    asked = AIMessage(content="", tool_calls=[{"name": "other", "args": {}, "id": "c1"}])
    agent = create_gated_agent(
        made,
        name="boss",
        model=_AsWritten(turns=[asked, AIMessage(content="done")]),
        tools=tools,
        enforce=True,
    )
    with pytest.raises(Denied) as raised:
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss)
    assert str(raised.value) == (
        "agentgate refused tool:other (invoke): the grant does not cover tool:other invoke: ask for a grant that covers it; "
        "[scope_creep/call_not_covered]. Do not retry this call; choose another way or stop."
    )
    assert "sk-live" not in str(raised.value)
    assert HELD in raised.value.decision.reasons[0]  # the application's for the asking
    made.flush()
    [refusal] = [e for e in made.audit.entries() if e.resource == "tool:other"]
    assert HELD in refusal.reasons[0]


def test_running_a_refusal_raises_without_the_list(gate: tuple[Gate, Any]) -> None:
    """Review R60: Gate.run of a refusal raised a Denied whose text listed every capability held."""
    made, boss = gate
    refused = made.authorize(boss, Call.tool("other", {}), call_id="c1")
    with pytest.raises(Denied) as raised:
        made.run(refused, lambda: "done")
    assert "it holds" not in str(raised.value)
    assert "the grant does not cover tool:other invoke" in str(raised.value)


@pytest.mark.parametrize(
    ("args", "extra"),
    [({"amount": 5}, f'api_key: {{eq: "{SECRET}"}}'), ({"amount": 600}, f'api_key: {{eq: "{SECRET}"}}')],
)
def test_an_enforced_refusal_names_a_constraint_on_an_injected_argument_without_its_operand(
    tmp_path: Path, args: dict[str, object], extra: str
) -> None:
    """Review R60: under enforce=True the Denied's text quoted the grant's operand on an injected argument (the key itself), which the model's refusal hides."""
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    text = INJECTED_POLICY.format(extra=extra, timeout="", **{n: k.did for n, k in keys.items()})
    made = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        boss = made.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

        def pay(amount: int, api_key: Annotated[str, InjectedToolArg] = "") -> str:
            return "paid"

        asked = AIMessage(content="", tool_calls=[{"name": "pay", "args": args, "id": "c1"}])
        agent = create_gated_agent(
            made,
            name="boss",
            model=_AsWritten(turns=[asked, AIMessage(content="done")]),
            tools=[StructuredTool.from_function(func=pay, name="pay", description="pay")],
            middleware=[_Injecting({"api_key": "sk-live-WRONG"})],
            enforce=True,
        )
        with pytest.raises(Denied) as raised:
            agent.invoke({"messages": [{"role": "user", "content": "pay"}]}, context=boss)
        assert "sk-live-" not in str(raised.value)
        assert "api_key=<not shown: an injected argument>" in str(raised.value)
    finally:
        made.close()
