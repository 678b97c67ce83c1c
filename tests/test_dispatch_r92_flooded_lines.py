"""A stream's lines let the event loop run while they are split (agentgate/dispatch/_sse.py,
``split_lines``).

Review R92: aiohttp's ``iter_any`` and httpx's ``aiter_raw`` hand over what is already buffered
without suspending, and ``split_lines`` handed out every line of it without suspending either: a
backend flooding keep-alive comments (``":"``) or empty events as fast as loopback carried them
held the event loop (every other call, the gateway, its health probes) for 1-2 s at a time, and
the stream's ``first_token_s`` fired that late. The loop now runs once every ``LINES_PER_TURN``
lines at most. These tests count turns of the loop against lines, never time: a task beside the
reader notes how far the reader had got each time it ran.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import _http
import httpx

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts, split_lines

LINES = 10_000
MOST_LINES_BETWEEN_TURNS = 512
"""The bound asserted: the loop runs at least once every this many lines (``_sse.LINES_PER_TURN``
may be set anywhere up to it)."""


async def _one_piece(body: bytes) -> AsyncIterator[bytes]:
    """A body already buffered whole: handed over at once, as aiohttp and httpx hand one over."""
    yield body


async def _turns_while(reading: asyncio.Task[None], progress: list[int]) -> list[int]:
    """Each ``progress[0]`` seen by a task that runs whenever the loop does, until ``reading`` ends."""
    seen: list[int] = []
    while not reading.done():
        seen.append(progress[0])
        await asyncio.sleep(0)
    await reading
    return seen


async def test_splitting_a_flood_of_buffered_lines_lets_the_loop_run() -> None:
    """Kills: ``split_lines`` handing out a piece's lines without ever suspending (the loop held
    for all 10,000 of them before; now at most ``MOST_LINES_BETWEEN_TURNS`` between two turns),
    for comments and empty lines alike."""
    progress = [0]

    async def read() -> None:
        async for line in split_lines(_one_piece(b":\n\n" * (LINES // 2)), 1 << 20):
            assert line in (":", "")
            progress[0] += 1

    reading = asyncio.get_running_loop().create_task(read())
    seen = await _turns_while(reading, progress)
    assert progress[0] == LINES
    marks = sorted({0, *seen, LINES})
    gaps = [after - before for before, after in itertools.pairwise(marks)]
    assert max(gaps) <= MOST_LINES_BETWEEN_TURNS, (max(gaps), len(seen))


async def test_a_stream_of_keep_alive_comments_lets_the_loop_run() -> None:
    """Kills: the yield off the path of the lines the stream's reader skips. Over httpx (the
    ``BackendClient(backend, httpx.AsyncClient)`` use docs/dispatch.md describes), a stream of
    10,000 comments then ``[DONE]``, buffered whole, lets a task beside it run at least once per
    ``MOST_LINES_BETWEEN_TURNS`` lines."""
    body = b":\n" * LINES + b"data: [DONE]\n\n"

    class Buffered(httpx.AsyncByteStream):
        """The body in one piece (``content=`` would be read whole before the stream is)."""

        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield body

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Buffered())

    inventory = inventory_from_mapping(
        {"gpus": [], "backends": [{"name": "flood", "url": "http://flood.invalid", "models": ["m"]}]}
    )

    async with _http.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = BackendClient(inventory.backends[0], http, Timeouts(first_token_s=60, idle_s=60))

        async def read() -> None:
            payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
            assert [chunk async for chunk in client.stream(payload)] == []

        reading = asyncio.get_running_loop().create_task(read())
        await asyncio.sleep(0)  # the reader starts: what the loop runs from here on is counted
        seen = await _turns_while(reading, [0])  # only how many times it ran counts here
    assert len(seen) >= LINES // MOST_LINES_BETWEEN_TURNS, len(seen)
