"""Review R60, second pass: a tool's result holding an integer beyond 64 bits where agentgate
cannot turn it to text without changing the tool's objects (a field of a pydantic model or a
dataclass artifact, a ``Command``'s update key other than ``messages``) is not kept: the model is
told that the tool ran and its result could not be kept, and the call's outcome is ``error``.
Until then the call was recorded ``ok`` and a checkpointed run ended in LangGraph's msgpack
``TypeError``."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r58_huge_integer import _Paying
from test_langgraph_r58_huge_integer import paying as paying  # the fixture
from test_langgraph_r60_object_artifacts import HUGE, _result, _WithExtra

from agentgate.integrations.langgraph import create_gated_agent


@pytest.mark.parametrize("kind", ["pydantic", "dataclass", "command"])
def test_a_result_the_checkpointer_cannot_store_is_an_error_the_model_is_told(
    paying: _Paying, kind: str
) -> None:
    """Review R60: an integer beyond 64 bits in an object artifact or a Command's other update key was recorded ok, then ended the checkpointed run in a TypeError."""

    def refund(order_id: str, amount: int, currency: str = "EUR") -> Any:
        return _result(kind)

    tool = StructuredTool.from_function(
        func=refund,
        name="payments.refund",
        description="refund",
        response_format="content" if kind == "command" else "content_and_artifact",
    )
    asked = AIMessage(
        content="",
        tool_calls=[{"name": "payments.refund", "args": {"order_id": "O-1", "amount": 5}, "id": "c1"}],
    )
    agent = create_gated_agent(
        paying.gate,
        name="boss",
        model=_AsWritten(turns=[asked, AIMessage(content="done")]),
        tools=[tool],
        middleware=[_WithExtra()],
        checkpointer=InMemorySaver(),  # serializes every step's state (msgpack)
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "refund O-1"}]},
        context=paying.boss,
        config={"configurable": {"thread_id": "t1"}},
    )
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert (told.status, told.tool_call_id, told.name) == ("error", "c1", "payments.refund")
    assert "ran, but its result holds an integer beyond 64 bits" in str(told.content)
    assert str(HUGE) not in str(told.content)
    assert result["messages"][-1].content == "done"  # the run went on to its end
    [allow, outcome] = paying.refusals()  # every entry of the tool
    assert (allow.kind, outcome.kind, outcome.status) == ("allow", "outcome", "error")
