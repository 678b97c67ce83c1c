"""Review R88: an answer's ``content`` that is falsy but no text (``false``, ``0``, ``0.0``, ``[]``,
``{}``) was read as the empty answer, whole or streamed, and passed on in the body: the check that
content is a string ran after ``or ""`` had made it one. A streamed delta's ``tool_calls`` that is
falsy but no list (``{}``, ``0``, ``false``) passed as no fragment likewise. Each is malformed
now, as a truthy one (``5``) was: ``BackendFailed`` naming the backend; absent or ``null`` is
still none. The gateway reads answers through the same client, and answers as for any other
malformed one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service, _settled
from test_gateway_r57_streams import Chattering

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, ChatChunk
from agentgate.errors import BackendFailed

BACKEND = inventory_from_mapping({"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"]}]})
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
USAGE = {"prompt_tokens": 1, "completion_tokens": 2}
FALSY = {"false": False, "zero": 0, "zero-float": 0.0, "empty-list": [], "empty-object": {}}

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env


class _Canned:
    """A ``ChatTransport`` answering every call with one message or delta, whole or as SSE events."""

    def __init__(self, part: dict[str, Any]) -> None:
        self.part = part

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        choice = {"index": 0, "message": self.part, "finish_reason": "stop"}
        return 200, json.dumps({"choices": [choice], "usage": USAGE}).encode()

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str]]]:
        async def lines() -> AsyncIterator[str]:
            yield "data: " + json.dumps({"choices": [{"index": 0, "delta": self.part}]})
            yield "data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            yield "data: [DONE]"

        async def start() -> bytes:
            return b""

        yield 200, start, lines()


async def _read(part: dict[str, Any], streamed: bool) -> str | list[ChatChunk]:
    async with httpx.AsyncClient() as http:
        client = BackendClient(BACKEND.backends[0], http)
        client.transport = _Canned(part)
        if not streamed:
            return (await client.chat(PAYLOAD)).content
        return [chunk async for chunk in client.stream(PAYLOAD)]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("value", sorted(FALSY))
def test_a_falsy_content_that_is_not_text_is_malformed(value: str, streamed: bool) -> None:
    part = {"role": "assistant", "content": FALSY[value]}
    with pytest.raises(BackendFailed, match=r"^b0: malformed .*content is not a string"):
        asyncio.run(_read(part, streamed))


@pytest.mark.parametrize("value", ["false", "zero", "empty-object"])
def test_a_streamed_falsy_tool_calls_that_is_not_a_list_is_malformed(value: str) -> None:
    part = {"role": "assistant", "tool_calls": FALSY[value]}
    with pytest.raises(BackendFailed, match=r"^b0: malformed stream event: tool_calls is not a list"):
        asyncio.run(_read(part, True))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    "part", [{"role": "assistant"}, {"content": None, "tool_calls": None}], ids=["absent", "null"]
)
def test_an_absent_or_null_content_is_still_the_empty_answer(part: dict[str, Any], streamed: bool) -> None:
    read = asyncio.run(_read(part, streamed))
    if isinstance(read, str):
        assert read == ""
    else:
        assert [(chunk.content, chunk.tool_calls) for chunk in read] == [("", ()), ("", ())]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_the_gateway_answers_a_falsy_content_as_a_backend_failure(
    env: Env, chattering: Chattering, streamed: bool
) -> None:
    """The call fails (502 or 503), nothing charged, streamed (before any output) or whole, where
    it was a 200 passing the ``content`` on."""
    _in_service(env)
    part = {"role": "assistant", "content": False}
    choice = {"index": 0, "message": part, "delta": part, "finish_reason": "stop"}
    chattering.json_answer = json.dumps({"id": "c", "choices": [choice], "usage": USAGE}).encode()
    event = json.dumps({"choices": [choice], "usage": USAGE}).encode()
    chattering.script = b"data: " + event + b"\n\ndata: [DONE]\n\n"
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script" if streamed else "json"):
        answer = env.post(_body(stream=streamed))
    assert answer.status_code in (502, 503), (answer.status_code, answer.text)
    assert answer.json()["error"]["code"] in ("backend_failed", "no_backend"), answer.text
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent
