"""Review R59: a tool call refused for an integer beyond 64 bits is recorded with its arguments as
the model sent them (the integer, not the text the run's state keeps it as), so its
``args_digest`` is the digest an auditor computes from the model's answer, and the same as a
``gated_tool_node`` records for the same call (tests/test_langgraph_r58_huge_integer.py)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from test_langgraph_r58_huge_integer import ARGS, HUGE, _Paying, _run
from test_langgraph_r58_huge_integer import paying as paying  # the fixture

from agentgate.authority._invocation import args_digest
from agentgate.gate import AgentIdentity
from agentgate.integrations.langgraph import gated_tool_node

AS_SENT = f"sha256:{args_digest(ARGS)}"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("saver", ["none", "sqlite"])
def test_the_refusal_is_recorded_over_the_arguments_as_the_model_sent_them(
    paying: _Paying, saver: str, mode: str
) -> None:
    """Review R59, the refusal's args_digest was over the integer as text: another call's digest.

    ``{"amount": "1000..."}`` is what a model sending the amount as a string makes; the entry
    logged that amount as a string too."""
    _run(paying, saver, mode)
    [refusal] = paying.refusals()
    assert refusal.kind == "deny"
    assert (refusal.args_digest, refusal.args["amount"]) == (AS_SENT, HUGE)


def test_a_gated_tool_node_records_the_same_digest(paying: _Paying) -> None:
    """The same call refused by a hand-built graph's tools node (no model hook) is recorded alike."""
    graph = StateGraph(MessagesState, context_schema=AgentIdentity)
    graph.add_node("tools", gated_tool_node(paying.gate, [paying.tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    asked = AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": ARGS, "id": "c1"}])
    graph.compile().invoke({"messages": [asked]}, context=paying.boss)
    [refusal] = paying.refusals()
    assert refusal.args_digest == AS_SENT


def test_nested_integers_are_restored_where_the_model_put_them(paying: _Paying) -> None:
    """Review R59, integers beyond 64 bits inside lists and objects are recorded as sent too."""
    args = {"order_id": "O-1", "amount": 5, "lines": [{"n": -HUGE}, 7, HUGE], "currency": "EUR"}
    asked = AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": args, "id": "c1"}])
    result = _run(paying, "sqlite", "sync", asked)
    assert result["messages"][1].tool_calls[0]["args"]["lines"] == [
        {"n": str(-HUGE)},
        7,
        str(HUGE),
    ]  # the state
    [refusal] = paying.refusals()
    assert refusal.args_digest == f"sha256:{args_digest(args)}"
