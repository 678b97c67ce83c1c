"""Review R61 of how long a non-streamed answer is waited for.

A non-streamed answer's deadline is ``first_token_s`` plus its output limit at the slowest decode
(``Timeouts.answer_s``, review R58). With no bound above it, a backend that accepts the connection
and never answers held a call with ``max_tokens`` 131072 (Llama 3.1's context) for 7.3 hours, and
one with the largest ``max_tokens`` the dispatcher takes (``MAX_USAGE_TOKENS``, a billion) for six
years, per attempt. ``Timeouts.answer_max_s`` (default 1800 s) bounds it.

Real HTTP on 127.0.0.1: a server that accepts the connection, reads the request and never answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

import pytest
from _raw_server import RawServer

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._answers import MAX_USAGE_TOKENS
from agentgate.dispatch.backends import DEFAULT_OUTPUT_TOKENS, Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed, InputError


@contextlib.asynccontextmanager
async def silent_backend() -> AsyncIterator[str]:
    """The URL of a backend that reads every request and never answers (it holds each
    connection until the client closes it)."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    server = RawServer(hold)
    port = await server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.stop()  # every connection ended, however far its client has got


def test_the_deadline_of_a_non_streamed_answer_is_bounded_by_answer_max_s() -> None:
    """Review R61: ``answer_s`` grew with ``max_tokens`` without bound (7.3 hours at 131072
    tokens, 6 years at a billion); it is now at most ``answer_max_s``, 1800 s by default, and a
    small limit is still ``first_token_s`` plus its decode."""
    timeouts = Timeouts()
    assert timeouts.answer_max_s == 1800
    for tokens in (131_072, MAX_USAGE_TOKENS, float(MAX_USAGE_TOKENS)):
        assert timeouts.answer_s({"max_tokens": tokens}) == 1800
    assert timeouts.answer_s({"max_tokens": 4000}) == 60 + 800
    assert timeouts.answer_s({}) == 60 + DEFAULT_OUTPUT_TOKENS / 5
    assert Timeouts(answer_max_s=30).answer_s({"max_tokens": 1}) == 30


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf])
def test_an_answer_bound_that_is_not_positive_and_finite_is_refused(value: float) -> None:
    """Review R61: ``answer_max_s`` is checked as the other limits are."""
    with pytest.raises(InputError, match="answer_max_s"):
        Timeouts(answer_max_s=value)


async def test_a_backend_that_never_answers_costs_a_call_at_most_answer_max_s_an_attempt() -> None:
    """Review R61: a backend that accepts and never answers, asked for ``MAX_USAGE_TOKENS``
    tokens, fails the call at ``answer_max_s``, naming the backend, and the router holds nothing
    in flight for it after."""
    async with silent_backend() as url:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "mute", "url": url, "engine": "vllm", "models": ["m"]}]}
        )
        router = Router(inventory)
        timeouts = Timeouts(first_token_s=0.2, answer_max_s=0.3)
        payload = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": MAX_USAGE_TOKENS,
        }
        async with Dispatcher(
            inventory, router, timeouts=timeouts, max_attempts=1, slo_ttft_s=30
        ) as dispatcher:
            with pytest.raises(BackendFailed, match=r"mute: no answer within 0\.3s"):
                await dispatcher.chat(payload)
            assert router.states["mute"].in_flight == 0
