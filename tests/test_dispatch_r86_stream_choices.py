"""Review R86: a whole answer with more choices than the call asked for is refused as malformed
(review R62), but a streamed one was not: a stream event's choices were held to neither that
count nor their ``index``, and only the first choice's ``finish_reason`` was bounded, so a second
choice of a call of one, its reason 60,000 characters holding an escape, reached the caller (and
the gateway's client) as a chunk. Now both read choices by one rule (``_checked_choices``): at
most the ``n`` asked, each ``index`` one of them, every ``finish_reason`` a reason; a whole answer
bounds every choice's reason too."""

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
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
BAD_REASON = "\x1b[2J" + "x" * 60000
USAGE = {"prompt_tokens": 1, "completion_tokens": 2}


class _Canned:
    """A ``ChatTransport`` answering every call with one body, whole or as SSE events."""

    def __init__(self, answer: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.answer, self.events = answer, events

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        return 200, json.dumps(self.answer).encode()

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str]]]:
        async def lines() -> AsyncIterator[str]:
            for event in self.events:
                yield "data: " + json.dumps(event)
            yield "data: [DONE]"

        async def start() -> bytes:
            return b""

        yield 200, start, lines()


async def _read(transport: _Canned, payload: dict[str, Any], streamed: bool) -> list[ChatChunk] | None:
    async with httpx.AsyncClient() as http:
        client = BackendClient(BACKEND.backends[0], http)
        client.transport = transport
        if not streamed:
            await client.chat(payload)
            return None
        return [chunk async for chunk in client.stream(payload)]


def _choice(index: object, reason: object = None, content: str = "hi") -> dict[str, Any]:
    return {
        "index": index,
        "delta": {"content": content},
        "message": {"content": content},
        "finish_reason": reason,
    }


REFUSED = {
    "a-second-choice": (
        [_choice(0, "stop"), _choice(1, BAD_REASON)],
        "2 choices for a call that asked for 1",
    ),
    "an-index-past-n": ([_choice(1)], "choice index 1 for a call that asked for 1 choices"),
    "an-index-not-a-number": ([_choice("0")], "choice index '0'"),
    "an-index-true": ([_choice(True)], "choice index True"),
}


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_choices_beyond_those_asked_for_are_malformed_streamed_or_whole(case: str, streamed: bool) -> None:
    choices, words = REFUSED[case]
    transport = _Canned(
        {"choices": choices, "usage": USAGE}, [{"choices": choices}, {"choices": [], "usage": USAGE}]
    )
    with pytest.raises(BackendFailed, match="malformed") as caught:
        asyncio.run(_read(transport, PAYLOAD, streamed))
    assert words in str(caught.value)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_every_choice_of_a_call_of_two_has_its_reason_bounded(streamed: bool) -> None:
    choices = [_choice(0, "stop"), _choice(1, BAD_REASON)]
    transport = _Canned(
        {"choices": choices, "usage": USAGE}, [{"choices": choices}, {"choices": [], "usage": USAGE}]
    )
    with pytest.raises(BackendFailed, match="finish_reason is not a reason"):
        asyncio.run(_read(transport, {**PAYLOAD, "n": 2}, streamed))


def test_a_stream_of_two_choices_asked_for_one_an_event_passes() -> None:
    events = [{"choices": [_choice(0)]}, {"choices": [_choice(1, "stop")]}, {"choices": [], "usage": USAGE}]
    chunks = asyncio.run(_read(_Canned({}, events), {**PAYLOAD, "n": 2}, True))
    assert chunks is not None and [c.event["choices"][0]["index"] for c in chunks if c.event["choices"]] == [
        0,
        1,
    ]
