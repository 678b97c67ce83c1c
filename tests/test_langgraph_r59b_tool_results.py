"""Review R59: a tool's result holding an integer beyond 64 bits (a ``content_and_artifact`` tool's
artifact, a content list, the messages of a ``Command`` it answers with) no longer ends a
checkpointed run: the result is kept with each such integer as its decimal text, as a model's
answer is (tests/test_langgraph_r58_huge_integer.py, tests/test_langgraph_r59_huge_usage.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langgraph.types import Command
from test_langgraph_r58_huge_integer import _Paying, _run

HUGE = 10**30
ARGS = {"order_id": "O-1", "amount": 5, "currency": "EUR"}


class _Answering(_Paying):
    """``_Paying``'s gate and agent, its refund tool answering as ``use`` sets; the model asks for
    one refund within range (``_asked``), then says "done"."""

    def use(self, answer: Any, response_format: str = "content_and_artifact") -> None:
        def refund(
            order_id: str,
            amount: int,
            tool_call_id: Annotated[str, InjectedToolCallId],
            currency: str = "EUR",
        ) -> Any:
            self.refunded.append(amount)
            return answer(tool_call_id) if callable(answer) else answer

        self.tool = StructuredTool.from_function(
            func=refund, name="payments.refund", description="refund", response_format=response_format
        )


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[_Answering]:
    made = _Answering(tmp_path)
    yield made
    made.gate.close()


def _asked() -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": ARGS, "id": "c1"}])


def _answer_of(result: dict[str, Any]) -> ToolMessage:
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert result["messages"][-1].content == "done"  # the model answered after it
    return answer


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("saver", ["sqlite", "memory"])
def test_an_artifact_with_an_integer_beyond_64_bits_is_kept_as_text(
    answering: _Answering, saver: str, mode: str
) -> None:
    """Review R59, a tool's artifact holding 10**30 ended a checkpointed run in ``TypeError``.

    The tool ran and was recorded as run, then LangGraph could not store its ``ToolMessage``
    (msgpack: 64 bits): ``TypeError: Type is not msgpack serializable: ToolMessage``."""
    answering.use(("refunded", {"ledger_id": HUGE, "lines": [1, -HUGE], "small": 7}))
    answer = _answer_of(_run(answering, saver, mode, _asked()))
    assert answer.status == "success" and answer.content == "refunded"
    assert answer.artifact == {"ledger_id": str(HUGE), "lines": [1, str(-HUGE)], "small": 7}
    assert answering.refunded == [5]  # it ran once
    [_, outcome] = answering.refusals()
    assert (outcome.kind, outcome.status) == ("outcome", "ok")


def test_a_content_list_with_such_an_integer_is_kept_as_text(answering: _Answering) -> None:
    """Review R59, the same ``TypeError`` for a tool answering a content list holding 10**30."""
    answering.use([{"type": "text", "text": "refunded", "ledger_id": HUGE}], response_format="content")
    answer = _answer_of(_run(answering, "sqlite", "sync", _asked()))
    assert answer.content == [{"type": "text", "text": "refunded", "ledger_id": str(HUGE)}]


def test_a_command_whose_message_holds_such_an_integer_is_kept_as_text(answering: _Answering) -> None:
    """Review R59, the same ``TypeError`` for a tool answering a ``Command`` whose message holds 10**30."""

    def command(call_id: str) -> Command[Any]:
        message = ToolMessage("refunded", artifact={"ledger_id": HUGE}, tool_call_id=call_id)
        return Command(update={"messages": [message]})

    answering.use(command, response_format="content")
    answer = _answer_of(_run(answering, "sqlite", "sync", _asked()))
    assert answer.artifact == {"ledger_id": str(HUGE)}


def test_a_result_within_range_is_kept_as_the_tool_made_it(answering: _Answering) -> None:
    """The usual result is the tool's own: not copied, its integers left as integers."""
    answering.use(("refunded", {"ledger_id": 2**63 - 1}))
    answer = _answer_of(_run(answering, "sqlite", "sync", _asked()))
    assert answer.artifact == {"ledger_id": 2**63 - 1}
