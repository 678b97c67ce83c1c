"""Review R61: a stream is bounded in time as a whole, not only between its chunks.

A backend that drips one character a chunk, each within ``idle_s`` of the last, pushed the idle
deadline out with every chunk, and the only bound was ``MAX_CHARS_PER_TOKEN`` characters a token
of ``max_tokens``: a call of ``max_tokens`` 4096 could be held for 4,194,304 chunks, at 29 s
apiece 3.9 years. A stream may now spend on the backend (time waited for its lines, not the
caller's time between chunks) at most ``Timeouts.stream_s``: ``first_token_s`` plus its output
limit decoded at ``decode_tokens_per_s``, and never less than ``answer_max_s``, so a slow honest
engine is never cut. Real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from test_dispatch_r61_backend_garbage import _DONE, _SSE, NAME, PAYLOAD, Garbage, _chunk

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed

TIMEOUTS = Timeouts(connect_s=2, first_token_s=0.5, idle_s=0.3, answer_max_s=0.6, decode_tokens_per_s=1000)
"""A stream of ``max_tokens`` 1 may take max(0.6, 0.5 + 0.001) = 0.6 s on the backend."""


class Drip(Garbage):
    """Streams ``tokens`` chunks of ``text``, ``every`` seconds apart (for ever for ``tokens``
    None), then ``[DONE]``: each chunk well within ``idle_s`` of the last."""

    def __init__(self) -> None:
        super().__init__()
        self.text = "x"
        self.every = 0.05
        self.tokens: int | None = None

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.asked += 1
        with contextlib.suppress(ConnectionError):
            w.write(_SSE)
            sent = 0
            while self.tokens is None or sent < self.tokens:
                w.write(_chunk(self.text))
                await w.drain()
                sent += 1
                await asyncio.sleep(self.every)
            w.write(_DONE)
            await w.drain()
        return False


@pytest.fixture
def drip() -> Iterator[Drip]:
    made = Drip()
    yield made
    made.close()


@contextlib.asynccontextmanager
async def dispatcher_of(url: str, timeouts: Timeouts = TIMEOUTS) -> AsyncIterator[tuple[Dispatcher, Router]]:
    inventory = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": url, "engine": "vllm", "models": ["small"]}]}
    )
    router = Router(inventory)
    async with Dispatcher(inventory, router, timeouts=timeouts, max_attempts=1, slo_ttft_s=30) as dispatcher:
        yield dispatcher, router


def test_the_time_a_stream_may_take_grows_with_its_output_limit_and_is_at_least_answer_max_s() -> None:
    """Review R61: ``stream_s`` is ``first_token_s`` plus the output limit decoded at
    ``decode_tokens_per_s`` (60 + 131072 / 5 s for ``max_tokens`` 131072: a slow honest engine
    is never cut), and at least ``answer_max_s`` (a call naming no limit, or a small one)."""
    timeouts = Timeouts()
    assert timeouts.stream_s({"max_tokens": 131_072}) == 60 + 131_072 / 5
    assert timeouts.stream_s({"max_completion_tokens": 10_000, "max_tokens": 1}) == 60 + 10_000 / 5
    assert timeouts.stream_s({"max_tokens": 1}) == timeouts.stream_s({}) == 1800
    assert TIMEOUTS.stream_s({"max_tokens": 1}) == 0.6


async def test_a_backend_dripping_one_character_a_chunk_is_cut_at_the_stream_deadline(drip: Drip) -> None:
    """Review R61: a backend sending one character every 0.05 s (well within ``idle_s``, and
    under the 1,024 characters ``max_tokens`` 1 allows) held the stream for as long as it
    dripped; it now fails, naming the backend and the deadline, once the stream has taken
    ``stream_s`` (0.6 s here), and the router holds nothing in flight for it."""
    passed = 0
    async with dispatcher_of(drip.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=rf"{NAME}: stream not done within 0\.6s") as caught:
            async with asyncio.timeout(5):  # the old code would drip for ever
                async for chunk in dispatcher.stream({**PAYLOAD, "max_tokens": 1, "stream": True}):
                    passed += len(chunk.content)
        assert router.states[NAME].in_flight == 0
    assert 0 < passed < 1024 and "\n" not in str(caught.value)


async def test_a_slow_honest_stream_longer_than_answer_max_s_is_served_whole(drip: Drip) -> None:
    """Review R61: an engine decoding 25 tokens a second (above ``decode_tokens_per_s``, 20 here)
    for 20 tokens takes 0.8 s, past ``answer_max_s`` (0.3 s); its stream is within
    ``first_token_s`` + 20 / 20 s and served whole."""
    drip.text, drip.every, drip.tokens = "tok ", 0.04, 20
    timeouts = Timeouts(connect_s=2, first_token_s=0.5, idle_s=0.3, answer_max_s=0.3, decode_tokens_per_s=20)
    async with dispatcher_of(drip.url, timeouts) as (dispatcher, _):
        chunks = [c async for c in dispatcher.stream({**PAYLOAD, "max_tokens": 20, "stream": True})]
    assert "".join(c.content for c in chunks) == "tok " * 20


async def test_a_stream_of_many_chunks_a_token_within_its_deadline_is_served_whole(drip: Drip) -> None:
    """Review R61: the deadline bounds time, not chunks: 10 one-character chunks for
    ``max_tokens`` 1 (an engine that sends a token's text in pieces) pass whole."""
    drip.every, drip.tokens = 0.01, 10
    async with dispatcher_of(drip.url) as (dispatcher, _):
        chunks = [c async for c in dispatcher.stream({**PAYLOAD, "max_tokens": 1, "stream": True})]
    assert "".join(c.content for c in chunks) == "x" * 10


async def test_the_callers_time_between_chunks_does_not_count_against_the_stream(drip: Drip) -> None:
    """Review R61: the deadline is the backend's time, not the caller's: a caller that takes
    0.2 s over each of 5 chunks a backend sent at once (1 s in all, past the 0.6 s) is served
    whole."""
    drip.every, drip.tokens = 0, 5
    seen = ""
    async with dispatcher_of(drip.url) as (dispatcher, _):
        async for chunk in dispatcher.stream({**PAYLOAD, "max_tokens": 1, "stream": True}):
            seen += chunk.content
            await asyncio.sleep(0.2)
    assert seen == "x" * 5
