"""Review R60: integers beyond 64 bits that ``_storable_result`` does not look into (an artifact
that is a pydantic model or a dataclass, a ``Command``'s update key other than ``messages``) reach
none of agentgate's records, so they break no write of agentgate's, and nothing the gate wrote
holds the integer. (LangGraph's checkpointer cannot store them, so since the second pass of
review R60 the result is not kept and the call is recorded ``error``:
tests/test_langgraph_r60b_unkept_results.py.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.types import Command
from pydantic import BaseModel
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r58_huge_integer import _Paying
from test_langgraph_r58_huge_integer import paying as paying  # the fixture

from agentgate.integrations.langgraph import create_gated_agent

HUGE = 10**30


class _Receipt(BaseModel):
    id: int


@dataclasses.dataclass
class _Ledger:
    id: int


class _Extra(AgentState[Any]):
    extra: int


class _WithExtra(AgentMiddleware[Any, Any, Any]):
    state_schema = _Extra


def _result(kind: str) -> Any:
    if kind == "command":
        return Command(update={"messages": [ToolMessage("refunded", tool_call_id="c1")], "extra": HUGE})
    return ("refunded", _Receipt(id=HUGE) if kind == "pydantic" else _Ledger(id=HUGE))


@pytest.mark.parametrize("kind", ["pydantic", "dataclass", "command"])
def test_such_an_integer_in_a_tools_result_reaches_no_record_of_agentgate(paying: _Paying, kind: str) -> None:
    """Review R60, checked: the gate's records of the call are written, and none holds it."""

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
    )
    agent.invoke({"messages": [{"role": "user", "content": "refund O-1"}]}, context=paying.boss)
    [allow, outcome] = paying.refusals()  # every entry of the tool
    assert (allow.kind, outcome.kind, outcome.status) == ("allow", "outcome", "error")
    with opened(paying.path / "agentgate.db") as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                assert not any(str(HUGE) in str(value) for value in row), table
