"""Review R90: an answer part the run's checkpointer cannot store is left out of the answer kept
(review R89), and the text of a tool call's arguments as the model wrote it was left out with
it: one raw call in ``additional_kwargs["tool_calls"]`` holding a vendor field nested past
msgpack's limit dropped the text of every call of the answer, so the check of a number no float
holds as written (review R54) was skipped and ``100.00000000000000001`` ran as ``100.0`` under
``amount<=100``; so did a Responses API ``function_call`` content block replaced the same way.
The text is now kept (``agentgate_written_args``) and the call refused; a call whose text cannot
be read back as it was is refused. Real agents, a real checkpointer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_exact_numbers import POLICY, _AsWritten

from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

INEXACT = '{"amount": 100.00000000000000001}'
INEXACT_SAID = "argument 'amount' is 100.00000000000000001, a number no float holds"
LEFT_OUT_KEY = "agentgate_left_out"
WRITTEN_ARGS_KEY = "agentgate_written_args"


def _deep(levels: int) -> object:
    """A value nested ``levels`` lists deep: msgpack stores about 250, orjson reads 1,024."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def _dispatched(arguments: str, **extra: object) -> AIMessage:
    """``DispatchedChatModel``'s answer to a backend's call of ``pay`` with ``arguments``, the raw
    call holding ``extra`` besides."""
    raw = {"id": "c1", "type": "function", "function": {"name": "pay", "arguments": arguments}, **extra}
    served = SimpleNamespace(
        body={"choices": [{"message": {"content": "", "tool_calls": [raw]}}]},
        content="",
        usage=SimpleNamespace(prompt_tokens=10, completion_tokens=5),
        backend="b",
        finish_reason="tool_calls",
    )
    message = DispatchedChatModel._result(served).generations[0].message
    assert isinstance(message, AIMessage)
    return message


def _responses(arguments: str, amount: float, **extra: object) -> AIMessage:
    """A Responses API answer: its call of ``pay`` as a ``function_call`` block holding ``extra``."""
    block = {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": arguments, **extra}
    return AIMessage(content=[block], tool_calls=[{"name": "pay", "args": {"amount": amount}, "id": "c1"}])


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[Any]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    paid: list[object] = []

    def pay(amount: float) -> str:
        paid.append(amount)
        return "paid"

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")

    def run(answer: AIMessage) -> tuple[ToolMessage, AIMessage, list[object]]:
        model = _AsWritten(turns=[answer, AIMessage(content="done")])
        agent = create_gated_agent(gate, name="boss", model=model, tools=[tool], checkpointer=InMemorySaver())
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "pay"}]},
            {"configurable": {"thread_id": "t"}},
            context=boss,
        )
        (told,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        (kept,) = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
        assert result["messages"][-1].content == "done"
        return told, kept, paid

    try:
        yield run
    finally:
        gate.close()


def test_an_unstorable_vendor_field_keeps_the_text_and_the_inexact_call_is_refused(paying: Any) -> None:
    told, kept, paid = paying(_dispatched(INEXACT, x_vendor={"trace": _deep(300)}))
    assert paid == []  # until the fix: [100.0]
    assert told.status == "error"
    assert INEXACT_SAID in str(told.content)
    assert kept.response_metadata[LEFT_OUT_KEY] == ["additional_kwargs['tool_calls']"]
    assert kept.response_metadata[WRITTEN_ARGS_KEY] == {"c1": INEXACT}


def test_an_exact_call_beside_an_unstorable_vendor_field_still_runs(paying: Any) -> None:
    told, _, paid = paying(_dispatched('{"amount": 50}', x_vendor={"trace": _deep(300)}))
    assert paid == [50.0]
    assert told.status == "success"


def test_a_responses_block_left_out_keeps_the_text_and_the_inexact_call_is_refused(paying: Any) -> None:
    told, kept, paid = paying(_responses(INEXACT, 100.0, x_vendor=_deep(300)))
    assert paid == []  # until the fix: [100.0]
    assert INEXACT_SAID in str(told.content)
    assert kept.response_metadata[LEFT_OUT_KEY] == ["content[0]"]
    assert kept.response_metadata[WRITTEN_ARGS_KEY] == {"c1": INEXACT}


def test_a_call_whose_text_would_be_read_otherwise_is_refused(paying: Any) -> None:
    # The raw call (read first) is left out; a block of the same call, kept, says other text: the
    # text the model's call was read from cannot be read back first, so the call is not run.
    answer = _responses('{"amount": 100}', 100.0)
    answer.additional_kwargs = {
        "tool_calls": [{"id": "c1", "function": {"name": "pay", "arguments": INEXACT}, "x": _deep(300)}]
    }
    told, kept, paid = paying(answer)
    assert paid == []  # until the fix: [100.0]
    assert told.status == "error"
    assert "could not be kept by the run's checkpointer" in str(told.content)
    assert list(kept.response_metadata["agentgate_unstorable"]) == ["c1"]
