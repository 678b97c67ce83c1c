"""Review R88, again: the fix that made a falsy content that is no text (``false``, ``0``, ``{}``)
malformed checked the first choice alone. With ``n`` = 2 a second choice's ``false`` or ``{}``
was accepted, whole or streamed, and the gateway passed every choice on. Every choice's content,
and every streamed choice's ``tool_calls``, is now checked with the rest of the choice
(``_checked_choices``): ``BackendFailed`` naming the backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, ChatChunk
from agentgate.errors import BackendFailed

BACKEND = inventory_from_mapping({"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"]}]})
PAYLOAD = {"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
USAGE = {"prompt_tokens": 1, "completion_tokens": 4}


class _TwoChoices:
    """A ``ChatTransport`` answering every call with two choices, whole or as one SSE event."""

    def __init__(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        self.parts = (first, second)

    def _choices(self, part: str) -> list[dict[str, Any]]:
        return [{"index": i, part: body, "finish_reason": "stop"} for i, body in enumerate(self.parts)]

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        return 200, json.dumps({"choices": self._choices("message"), "usage": USAGE}).encode()

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str]]]:
        async def lines() -> AsyncIterator[str]:
            yield "data: " + json.dumps({"choices": self._choices("delta"), "usage": USAGE})
            yield "data: [DONE]"

        async def start() -> bytes:
            return b""

        yield 200, start, lines()


async def _read(second: dict[str, Any], streamed: bool) -> str | list[ChatChunk]:
    async with httpx.AsyncClient() as http:
        client = BackendClient(BACKEND.backends[0], http)
        client.transport = _TwoChoices({"role": "assistant", "content": "ok"}, second)
        if not streamed:
            return (await client.chat(PAYLOAD)).content
        return [chunk async for chunk in client.stream(PAYLOAD)]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("content", [False, 0, [], {}, 5], ids=["false", "zero", "list", "object", "five"])
def test_a_second_choices_content_that_is_not_text_is_malformed(content: object, streamed: bool) -> None:
    second = {"role": "assistant", "content": content}
    with pytest.raises(BackendFailed, match=r"^b0: malformed .*content is not a string"):
        asyncio.run(_read(second, streamed))


@pytest.mark.parametrize("calls", [{}, 0, False, {"a": 1}], ids=["object", "zero", "false", "truthy"])
def test_a_second_choices_streamed_tool_calls_that_is_not_a_list_is_malformed(calls: object) -> None:
    second = {"role": "assistant", "tool_calls": calls}
    with pytest.raises(BackendFailed, match=r"^b0: malformed stream event: tool_calls is not a list"):
        asyncio.run(_read(second, True))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_second_choice_of_text_or_none_is_still_read(streamed: bool) -> None:
    for second in ({"role": "assistant", "content": "yes"}, {"content": None, "tool_calls": None}):
        read = asyncio.run(_read(second, streamed))
        if isinstance(read, str):
            assert read == "ok"
        else:
            assert [chunk.content for chunk in read] == ["ok"]
