"""A model reporting a usage count beyond 64 bits (10**30 input tokens) no longer ends a
checkpointed run: its answer is kept with such a count as text in its metadata and without its
``usage_metadata``, and the call is charged as reserved (review R59).

A real ``create_agent`` run (``create_gated_agent``) of LangChain's own ``ChatOpenAI`` over real
HTTP on 127.0.0.1 to a raw backend (``Hostile``, tests/test_gateway_hostile_backends.py) that
answers with the usage a test sets; checkpointed by ``SqliteSaver`` (``AsyncSqliteSaver``
async) and ``InMemorySaver``, as tests/test_langgraph_r58_huge_integer.py runs them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from test_gateway_hostile_backends import Hostile, _json
from test_langgraph_r58_huge_integer import _Paying, _run

from agentgate.integrations.langgraph import create_gated_agent

HUGE = 10**30
UNREAD = f"reported usage ({HUGE}, 3) is not two token counts from 0 to 1,000,000,000; charged as reserved"


class Reporting(Hostile):
    """A backend whose JSON answer is "done", reporting the usage ``usage``."""

    def __init__(self) -> None:
        super().__init__()
        self.usage: dict[str, Any] = {}

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        message = {"role": "assistant", "content": "done"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "c", "object": "chat.completion", "created": 0, "model": "scripted"}
        w.write(_json(json.dumps({**body, "choices": [choice], "usage": self.usage}).encode()))
        return True


class _Reported(_Paying):
    """``_Paying``'s gate and policy, its agent's model a ``ChatOpenAI`` of ``url``."""

    url = ""

    def agent(self, checkpointer: Any, answer: AIMessage | None = None) -> Any:
        model = ChatOpenAI(model="scripted", base_url=self.url + "/v1", api_key="k", max_retries=0)
        return create_gated_agent(
            self.gate, name="boss", model=model, tools=[self.tool], checkpointer=checkpointer
        )


@pytest.fixture
def backend() -> Iterator[Reporting]:
    made = Reporting()
    yield made
    made.close()


@pytest.fixture
def reported(tmp_path: Path, backend: Reporting) -> Iterator[_Reported]:
    made = _Reported(tmp_path)
    made.url = backend.url
    yield made
    made.gate.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("saver", ["sqlite", "memory"])
def test_a_usage_beyond_64_bits_is_charged_as_reserved_and_the_run_is_checkpointed(
    reported: _Reported, backend: Reporting, saver: str, mode: str
) -> None:
    """Review R59, a model's usage of 10**30 input tokens ended a checkpointed run in ``TypeError``.

    LangGraph's checkpointers store integers of 64 bits at most (msgpack): the answer, whose
    ``usage_metadata`` and ``response_metadata["token_usage"]`` held 10**30, could not be
    stored, and the run ended in ``TypeError: Type is not msgpack serializable: AIMessage``
    after the call was charged."""
    backend.usage = {"prompt_tokens": HUGE, "completion_tokens": 3, "total_tokens": HUGE + 3}
    result = _run(reported, saver, mode)
    answer = result["messages"][-1]
    assert isinstance(answer, AIMessage) and answer.content == "done"
    assert answer.usage_metadata is None
    assert answer.response_metadata["token_usage"]["prompt_tokens"] == str(HUGE)
    assert answer.response_metadata["token_usage"]["completion_tokens"] == 3
    reported.gate.flush()
    [outcome] = [e for e in reported.gate.audit.entries() if e.kind == "outcome"]
    assert (outcome.status, list(outcome.reasons)) == ("ok", [UNREAD])


def test_a_usage_within_range_is_kept_as_reported(reported: _Reported, backend: Reporting) -> None:
    """The usual answer is kept as the model made it: its usage read and charged."""
    backend.usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    answer = _run(reported, "sqlite", "sync")["messages"][-1]
    assert answer.usage_metadata is not None and answer.usage_metadata["input_tokens"] == 12
    assert answer.response_metadata["token_usage"]["prompt_tokens"] == 12
