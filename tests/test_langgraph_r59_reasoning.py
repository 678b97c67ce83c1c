"""A reasoning model's reasoning reaches the ``DispatchedChatModel``'s answer, streamed or not, in
``additional_kwargs["reasoning_content"]`` (where LangChain's content blocks read it), once, and
the usage stays the backend's (review R59).

Real HTTP on 127.0.0.1: a raw backend (``Hostile``, tests/test_gateway_hostile_backends.py) that
answers a JSON call with the body ``answer`` and a streamed call with the bytes ``script``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from test_dispatched_streaming import _added_up, _gate
from test_gateway_hostile_backends import _SSE, Hostile, _json

from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph import DispatchedChatModel

USAGE = {"prompt_tokens": 5, "completion_tokens": 9}
METADATA = {"input_tokens": 5, "output_tokens": 9, "total_tokens": 14}


class Reasoning(Hostile):
    """A backend answering a JSON call with ``answer`` and a streamed one with ``script``."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: dict[str, Any] = {}
        self.script = b""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if not stream:
            w.write(_json(json.dumps(self.answer).encode()))
            return True
        w.write(_SSE + self.script)
        await w.drain()
        return False


@pytest.fixture
def backend() -> Iterator[Reasoning]:
    made = Reasoning()
    yield made
    made.close()


def _whole(message: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    return {"id": "c", "object": "chat.completion", "choices": [choice], "usage": USAGE}


def _events(*deltas: dict[str, Any]) -> bytes:
    events = [{"choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    events.append({"choices": [], "usage": USAGE})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _answer(tmp_path: Path, backend: Reasoning, how: str) -> BaseMessage:
    with _gate(tmp_path, backend.url, metrics=False) as gate:
        model = DispatchedChatModel(gate=gate, model_name="llama-3.1-8b", max_tokens=32)
        if how == "invoke":
            return model.invoke([HumanMessage("9.11 or 9.8?")])
        if how == "stream":
            return _added_up(list(model.stream([HumanMessage("9.11 or 9.8?")])))

        async def collect() -> list[Any]:
            return [chunk async for chunk in model.astream([HumanMessage("9.11 or 9.8?")])]

        return _added_up(asyncio.run(collect()))


# SGLang's (and vLLM's before v0.11) name; vLLM's now; a vLLM sending both with the same text.
NAMES = {
    "reasoning_content": ("reasoning_content",),
    "reasoning": ("reasoning",),
    "both": ("reasoning_content", "reasoning"),
}


@pytest.mark.parametrize("named", sorted(NAMES))
@pytest.mark.parametrize("how", ["invoke", "stream", "astream"])
def test_a_reasoning_models_reasoning_is_in_the_answer_once_and_not_in_its_usage(
    tmp_path: Path, backend: Reasoning, how: str, named: str
) -> None:
    """Review R59, the reasoning of vLLM's or SGLang's reasoning parser was dropped by ``DispatchedChatModel``.

    An answer whose ``message.reasoning_content`` (streamed: ``delta.reasoning_content``) held
    the model's thinking came out of the model with its content only. It is now in
    ``additional_kwargs["reasoning_content"]`` (a ``reasoning`` content block), once however many
    of the two names carry it, and the usage is the one the backend reported."""
    names = NAMES[named]
    backend.answer = _whole({"content": "9.8", **dict.fromkeys(names, "Compare 0.11 with 0.8.")})
    backend.script = _events(
        {"role": "assistant", "content": ""},
        dict.fromkeys(names, "Compare 0.11 "),
        dict.fromkeys(names, "with 0.8."),
        {"content": "9.8"},
    )
    answer = _answer(tmp_path, backend, how)
    assert isinstance(answer, AIMessage)
    assert answer.content == "9.8"
    assert answer.additional_kwargs == {"reasoning_content": "Compare 0.11 with 0.8."}
    assert answer.content_blocks[0] == {"type": "reasoning", "reasoning": "Compare 0.11 with 0.8."}
    assert answer.usage_metadata == METADATA


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_reasoning_that_is_not_a_string_is_a_backend_failure(
    tmp_path: Path, backend: Reasoning, how: str
) -> None:
    """As content that is not a string is: a ``BackendFailed`` naming the field, never an answer."""
    backend.answer = _whole({"content": "9.8", "reasoning_content": {"text": "x"}})
    backend.script = _events({"reasoning_content": 7}, {"content": "9.8"})
    with pytest.raises(BackendFailed, match="reasoning_content is not a string"):
        _answer(tmp_path, backend, how)
