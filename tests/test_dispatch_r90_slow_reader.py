"""Review R90: the caller's time holding a chunk of a stream is not counted against the backend's
``first_token_s`` nor its ``idle_s``.

A stream's deadline for its next chunk was fixed in time, and ran on while the caller held a
chunk yielded that did not advance the answer (vLLM opens with a role-only chunk; an empty delta
mid-stream): only the stream's time in all (``stream_s``) left the caller's time out. A backend
that sent its first token at 0.3 s failed "no first token within 1s of the request
(first_token_s)" for a reader that took 1.5 s over the role chunk, and the dispatcher would mark
it down. docs/dispatch.md: the caller's own time between chunks does not count.

The backend here is a transport whose lines each come a moment after they are asked for (the
first at once), so that a deadline that ran out while the caller held a chunk fires.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import _http
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, StreamAnswer, Timeouts
from agentgate.errors import BackendFailed

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
HOLD_S = 0.5
"""How long the caller holds the chunk named: past the deadline it must not count against."""
DEADLINE_S = 0.3


def _event(delta: dict[str, Any], finish: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


ROLE = _event({"role": "assistant", "content": ""})
EMPTY = _event({"content": ""})


class _Backend:
    """A ``ChatTransport`` streaming ``lines``: the first at once, each other 20 ms after it is
    asked for; after the last, nothing (the stream held open, silent)."""

    def __init__(self, *lines: str) -> None:
        self.lines = lines

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        raise AssertionError("a stream is not posted")

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> AsyncIterator[StreamAnswer]:
        async def lines() -> AsyncIterator[str]:
            for count, line in enumerate(self.lines):
                if count:
                    await asyncio.sleep(0.02)
                yield line
            await asyncio.Event().wait()

        async def start() -> bytes:
            return b""

        yield 200, start, lines(), None


async def _read(backend: _Backend, timeouts: Timeouts, held: str) -> list[str]:
    """The contents a caller reads, holding the chunk whose line is ``held`` for ``HOLD_S``."""
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"]}]}
    )
    contents = []
    async with _http.AsyncClient() as http:
        client = BackendClient(inventory.backends[0], http, timeouts)
        client.transport = backend
        async with asyncio.timeout(5):
            async for chunk in client.stream(PAYLOAD):
                contents.append(chunk.content)
                if backend.lines[len(contents) - 1] == held:
                    await asyncio.sleep(HOLD_S)
    return contents


async def test_the_caller_holding_the_role_chunk_is_not_a_slow_first_token() -> None:
    backend = _Backend(ROLE, _event({"content": "hi"}, "stop"), "data: [DONE]")
    timeouts = Timeouts(first_token_s=DEADLINE_S, idle_s=5)
    assert await _read(backend, timeouts, held=ROLE) == ["", "hi"]


async def test_the_caller_holding_an_empty_delta_is_not_a_silent_backend() -> None:
    backend = _Backend(_event({"content": "a"}), EMPTY, _event({"content": "b"}, "stop"), "data: [DONE]")
    timeouts = Timeouts(first_token_s=5, idle_s=DEADLINE_S)
    assert await _read(backend, timeouts, held=EMPTY) == ["a", "", "b"]


async def test_a_backend_that_never_sends_its_first_token_still_fails_in_its_own_time() -> None:
    """The caller's time is left out, the backend's is not: no token after the role chunk is
    still "no first token" once ``first_token_s`` of the backend's own time has gone."""
    timeouts = Timeouts(first_token_s=DEADLINE_S, idle_s=5)
    with pytest.raises(BackendFailed, match=r"no first token within 0\.3s of the request \(first_token_s\)"):
        await _read(_Backend(ROLE), timeouts, held=ROLE)
