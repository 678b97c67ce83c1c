"""Review R59: structured output (``create_agent(..., response_format=...)``) under the gate.

The structured answer is no tool call: under ``ToolStrategy`` the model answers through an
artificial call named after the schema, which LangChain parses inside the model call; it needs
no grant and is not decided or recorded as a tool call, while the model call that gives it is
decided and charged as any other. A structured answer holding an integer beyond 64 bits ended a
checkpointed run in LangGraph's ``TypeError: Type is not msgpack serializable`` (SqliteSaver,
AsyncSqliteSaver, InMemorySaver): it is now refused as LangChain refuses an answer it cannot
parse, the model told which field."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain.agents.structured_output import ProviderStrategy, StructuredOutputValidationError, ToolStrategy
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pydantic import BaseModel
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r58_huge_integer import POLICY, _Paying

from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HUGE = 10**30
SAID = f"field ['amount'] is {HUGE}, an integer beyond the range the run's state can hold"


class Refund(BaseModel):
    order_id: str
    amount: int


def _structured(args: dict[str, Any], call_id: str = "s1") -> AIMessage:
    """An answer through ``ToolStrategy``'s artificial call of ``Refund``."""
    return AIMessage(content="", tool_calls=[{"name": "Refund", "args": args, "id": call_id}])


class _Structured(_Paying):
    """``_Paying``'s policy (no grant names ``Refund``) with a budget of tokens, its agent
    answering ``turns`` in the form ``response_format``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.gate.close()
        keys = {n: SigningKey.generate() for n in ("root", "boss")}
        text = POLICY.replace(
            "    ttl_s: 3600", "    ttl_s: 3600\n    budget: {{limit: 1000000, unit: tokens}}"
        )
        policy = parse_policy(text.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
        self.gate = Gate(policy, SQLiteStore(tmp_path / "structured.db"))
        self.boss = self.gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

    def run(
        self,
        turns: list[AIMessage],
        response_format: Any,
        saver: str = "sqlite",
        mode: str = "sync",
        gate_models: bool = True,
    ) -> Any:
        config: Any = {"configurable": {"thread_id": "t"}}
        asked = {"messages": [{"role": "user", "content": "which refund?"}]}

        def agent(checkpointer: Any) -> Any:
            return create_gated_agent(
                self.gate,
                name="boss",
                model=_AsWritten(turns=turns),
                tools=[self.tool],
                checkpointer=checkpointer,
                response_format=response_format,
                gate_models=gate_models,
            )

        if mode == "sync":
            with opened(self.path / "checkpoints.sqlite", check_same_thread=False) as conn:
                checkpointer = {"memory": InMemorySaver(), "sqlite": SqliteSaver(conn)}[saver]
                return agent(checkpointer).invoke(asked, config, context=self.boss)

        async def run() -> Any:
            async with AsyncSqliteSaver.from_conn_string(str(self.path / "checkpoints.sqlite")) as sqlite:
                checkpointer = {"memory": InMemorySaver(), "sqlite": sqlite}[saver]
                return await agent(checkpointer).ainvoke(asked, config, context=self.boss)

        return asyncio.run(run())

    def entries(self) -> list[Any]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if e.resource != "agent:boss"]


@pytest.fixture
def structured(tmp_path: Path) -> Iterator[_Structured]:
    made = _Structured(tmp_path)
    yield made
    made.gate.close()


def test_the_structured_answer_is_no_tool_call_but_its_model_call_is_decided(structured: _Structured) -> None:
    """The artificial call needs no grant (none names ``Refund``) and leaves no tool entry; the
    model call that gave it is allowed and settled as any other."""
    result = structured.run([_structured({"order_id": "O-1", "amount": 5})], ToolStrategy(Refund))
    assert result["structured_response"] == Refund(order_id="O-1", amount=5)
    assert [(e.kind, e.resource) for e in structured.entries()] == [
        ("allow", "model:scripted"),
        ("outcome", "model:scripted"),
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("saver", ["sqlite", "memory"])
def test_a_structured_answer_with_an_integer_beyond_64_bits_is_refused_and_asked_again(
    structured: _Structured, saver: str, mode: str
) -> None:
    """Review R59, a structured answer holding 10**30 ended a checkpointed run in ``TypeError``.

    ``structured_response`` (``Refund(amount=10**30)``) could not be stored (msgpack: 64 bits),
    after the model call was charged; now the model is told which field and answers again."""
    turns = [
        _structured({"order_id": "O-1", "amount": HUGE}),
        _structured({"order_id": "O-1", "amount": 5}, "s2"),
    ]
    result = structured.run(turns, ToolStrategy(Refund), saver, mode)
    assert result["structured_response"] == Refund(order_id="O-1", amount=5)
    refused = next(m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "s1")
    assert refused.status == "error" and SAID in str(refused.content)
    kinds = [(e.kind, e.resource, e.status) for e in structured.entries()]
    assert kinds == [("allow", "model:scripted", None), ("outcome", "model:scripted", "ok")] * 2


def test_a_provider_answer_with_such_an_integer_ends_in_langchains_error(structured: _Structured) -> None:
    """Review R59, the same ``TypeError`` under ``ProviderStrategy``, which LangChain never retries:
    its own ``StructuredOutputValidationError`` naming the field, as for an answer it cannot parse."""
    turns = [AIMessage(content=f'{{"order_id": "O-1", "amount": {HUGE}}}')]
    with pytest.raises(StructuredOutputValidationError, match=r"field \['amount'\] is 1000"):
        structured.run(turns, ProviderStrategy(Refund))


def test_without_retries_such_an_answer_ends_in_langchains_error(structured: _Structured) -> None:
    """Review R59, the same ``TypeError`` under ``ToolStrategy(handle_errors=False)``."""
    turns = [_structured({"order_id": "O-1", "amount": HUGE})]
    with pytest.raises(StructuredOutputValidationError, match=r"field \['amount'\] is 1000"):
        structured.run(turns, ToolStrategy(Refund, handle_errors=False))


def test_an_integer_given_as_text_is_refused_too(structured: _Structured) -> None:
    """Review R59, the schema turns the text "10**30" into the integer: it is the parsed answer that
    the state keeps, so that is what is checked."""
    turns = [
        _structured({"order_id": "O-1", "amount": str(HUGE)}),
        _structured({"order_id": "O-1", "amount": 5}, "s2"),
    ]
    result = structured.run(turns, ToolStrategy(Refund, handle_errors="bad amount"))
    assert result["structured_response"] == Refund(order_id="O-1", amount=5)
    refused = next(m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "s1")
    assert (refused.status, refused.content) == ("error", "bad amount")  # the user's handle_errors


@pytest.mark.parametrize(
    ("turns", "response_format"),
    [
        ([AIMessage(content='{"order_id": ')], ProviderStrategy(Refund)),
        ([_structured({"order": 1})], ToolStrategy(Refund, handle_errors=False)),
        ([_structured({"order_id": "O-1", "amount": HUGE})], ToolStrategy(Refund, handle_errors=False)),
    ],
    ids=["invalid-json", "wrong-shape", "beyond-64-bits"],
)
def test_a_model_call_whose_answer_cannot_be_parsed_is_charged(
    structured: _Structured, turns: list[AIMessage], response_format: Any
) -> None:
    """Review R59, a model call whose structured answer LangChain could not parse was free.

    LangChain raises ``StructuredOutputValidationError`` inside the model call, after the model
    answered: the call was settled as an error that never ran, its reservation released
    (``budget_delta`` 0), so each such answer was a free generation. It is charged as reserved."""
    with pytest.raises(StructuredOutputValidationError):
        structured.run(turns, response_format)
    [_, outcome] = structured.entries()
    assert (outcome.kind, outcome.status) == ("outcome", "error")
    assert outcome.reasons[0] == "StructuredOutputValidationError"
    assert outcome.budget_delta is not None and outcome.budget_delta > 0


def test_a_schema_given_alone_with_ungated_models_is_refused_alike(structured: _Structured) -> None:
    """Review R59, the same ``TypeError`` with ``gate_models=False`` and the schema given alone
    (which LangChain makes a ``ToolStrategy`` of): the model is told, and answers again."""
    turns = [
        _structured({"order_id": "O-1", "amount": HUGE}),
        _structured({"order_id": "O-1", "amount": 5}, "s2"),
    ]
    result = structured.run(turns, Refund, gate_models=False)
    assert result["structured_response"] == Refund(order_id="O-1", amount=5)
    refused = next(m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "s1")
    assert refused.status == "error" and SAID in str(refused.content)
