"""A JSON answer whose ``Content-Length`` declares more than ``MAX_ANSWER_BYTES`` is refused at its
head on every client path, as ``AnswerTooLarge``, however much of the body follows (review R58).

Real HTTP on 127.0.0.1: a raw backend (``Hostile``, tests/test_gateway_hostile_backends.py) that
declares the length and sends a few bytes of the body, then closes the connection (``cut``) or
holds it open (``held``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from test_dispatch_r58_answer_deadline import client_on
from test_gateway_hostile_backends import Hostile, _head

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import MAX_ANSWER_BYTES, Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import AnswerTooLarge

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
TIMEOUTS = Timeouts(connect_s=2, first_token_s=3)
"""Short enough that a client still waiting for the held body gives up within the test."""


class Declares(Hostile):
    """A backend that answers a JSON call 200 with a ``Content-Length`` of ``MAX_ANSWER_BYTES + 1``
    and the start of a chat completion, then, in mode ``cut``, closes the connection, and in mode
    ``held``, holds it open until the client closes it (or a minute). ``asked`` counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.asked += 1
        head = {"content-type": "application/json", "content-length": str(MAX_ANSWER_BYTES + 1)}
        w.write(_head("200 OK", head) + b'{"choices":[{"message":{"content":"')
        await w.drain()
        if self.mode == "held":
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(r.read(), 60)
        return False


@pytest.fixture
def backend() -> Iterator[Declares]:
    made = Declares()
    yield made
    made.close()


@pytest.mark.parametrize("mode", ["cut", "held"])
@pytest.mark.parametrize("path", ["aiohttp", "httpx", "gateway-pool"])
async def test_a_declared_length_over_the_limit_is_refused_at_the_head(
    backend: Declares, path: str, mode: str
) -> None:
    """Review R58, the dispatcher's own clients read a body declared over MAX_ANSWER_BYTES.

    The gateway's pool refused such an answer at its head (``AnswerTooLarge``); the dispatcher's
    aiohttp and httpx clients read up to the limit first, so a body cut short was a
    ``BackendFailed`` (a payload error) and a body held back waited ``first_token_s`` and was a
    ``BackendFailed`` (a timeout). Every path now says ``AnswerTooLarge`` at the head."""
    backend.mode = mode
    async with client_on(path, backend.url, TIMEOUTS) as client:
        with pytest.raises(AnswerTooLarge, match=f"larger than {MAX_ANSWER_BYTES} bytes"):
            await client.chat(PAYLOAD)
    assert backend.asked == 1


@pytest.mark.parametrize("mode", ["cut", "held"])
async def test_the_dispatcher_neither_retries_nor_marks_down_a_declared_length_over_the_limit(
    backend: Declares, mode: str
) -> None:
    """Review R58, a declared length over the limit and a body cut short was a ``BackendFailed``
    in process: sent to each of three backends (each generated the answer again) and each marked
    down, where the gateway asks once (``AnswerTooLarge``: the call asked for that much)."""
    backend.mode = mode
    names = ("a", "b", "c")
    inventory = inventory_from_mapping(
        {"backends": [{"name": n, "url": backend.url, "engine": "vllm", "models": ["m"]} for n in names]}
    )
    async with Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS) as dispatcher:
        with pytest.raises(AnswerTooLarge):
            await dispatcher.chat(PAYLOAD)
        assert backend.asked == 1
        assert not any(dispatcher.is_down(n) for n in names)
