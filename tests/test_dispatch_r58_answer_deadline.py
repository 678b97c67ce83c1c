"""A non-streamed answer comes whole, after its last token: it is waited for ``first_token_s`` plus
its output limit decoded at ``decode_tokens_per_s`` (``Timeouts.answer_s``), not ``first_token_s``
alone (review R58).

Real HTTP on 127.0.0.1: a raw backend (``Hostile``, tests/test_gateway_hostile_backends.py) that
answers a JSON call after ``delay`` seconds, or never.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Iterator

import _http
import aiohttp
import pytest
from test_gateway_hostile_backends import _OK_JSON, Hostile, _json

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import DEFAULT_OUTPUT_TOKENS, BackendClient, Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed, DispatchError, InputError

TIMEOUTS = Timeouts(connect_s=2, first_token_s=0.2)
"""A first token limit the backend's delay passes; at the default 5 tokens a second, 8 tokens
add 1.6 s to a non-streamed answer's deadline, one token 0.2 s."""
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


class Slow(Hostile):
    """A backend that answers a JSON call after ``delay`` seconds, in mode ``hang`` never (it holds
    the connection until the client closes it); ``asked`` counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.6
        self.asked = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if stream:
            return await super()._answer(w, r, stream)
        self.asked += 1
        if self.mode == "hang":
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(r.read(), 60)
            return False
        await asyncio.sleep(self.delay)
        w.write(_json(_OK_JSON))
        return True


@pytest.fixture
def backend() -> Iterator[Slow]:
    made = Slow()
    yield made
    made.close()


async def test_a_non_streamed_answer_slower_than_first_token_s_is_not_a_failure(backend: Slow) -> None:
    """Review R58, a non-streamed answer was waited for ``first_token_s`` in all.

    Its deadline covered the whole generation, however many tokens the call asked for: an answer
    that took longer (60 s by default: 2,000 tokens at 30 a second) was a ``BackendFailed``,
    sent again to each of three backends (each generating it again) and each marked down. Here
    the answer takes three times ``first_token_s``, within what 8 tokens at the slowest decode
    allow: it is served once, and no backend is marked down."""
    names = ("a", "b", "c")
    inventory = inventory_from_mapping(
        {"backends": [{"name": n, "url": backend.url, "engine": "vllm", "models": ["m"]} for n in names]}
    )
    async with Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS, slo_ttft_s=30) as dispatcher:
        result = await dispatcher.chat(PAYLOAD)
        assert result.content and backend.asked == 1
        assert not any(dispatcher.is_down(n) for n in names)


@contextlib.asynccontextmanager
async def client_on(path: str, url: str, timeouts: Timeouts) -> AsyncIterator[BackendClient]:
    """A ``BackendClient`` of one vLLM backend at ``url`` over ``path``: the dispatcher's own
    aiohttp or httpx client, or the gateway's pool (``gateway-pool``); closed after."""
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": url, "engine": "vllm", "models": ["m"]}]}
    )
    pool = UpstreamPool()
    session = aiohttp.ClientSession() if path == "aiohttp" else None
    try:
        async with _http.AsyncClient() as http_client:
            client = BackendClient(inventory.backends[0], http_client, timeouts, session=session)
            if path == "gateway-pool":
                client.transport = pool
            yield client
    finally:
        if session is not None:
            await session.close()
        await pool.aclose()


@pytest.mark.parametrize("mode", ["ok", "hang"])
@pytest.mark.parametrize("path", ["aiohttp", "httpx", "gateway-pool"])
async def test_every_client_path_waits_for_a_non_streamed_answer_by_its_output_limit(
    backend: Slow, path: str, mode: str
) -> None:
    """Each client path (the dispatcher's aiohttp and httpx clients, the gateway's pool) reads a
    slow answer within its deadline, and gives up on one that never comes at that deadline
    (``first_token_s`` + 1 token / 5 a second = 0.4 s), naming it."""
    backend.mode = mode
    async with client_on(path, backend.url, TIMEOUTS) as client:
        if mode == "ok":
            assert (await client.chat(PAYLOAD)).content
        else:
            with pytest.raises(BackendFailed, match=r"no answer within 0\.4s"):
                await client.chat({**PAYLOAD, "max_tokens": 1})


def test_the_deadline_of_a_non_streamed_answer_grows_with_its_output_limit() -> None:
    """``answer_s``: ``first_token_s`` plus the output limit (``max_completion_tokens`` first, as
    the router reads it; ``DEFAULT_OUTPUT_TOKENS`` for none; a ``DispatchError`` for one that is
    no whole number) over ``decode_tokens_per_s``."""
    timeouts = Timeouts(first_token_s=60, decode_tokens_per_s=5)
    assert timeouts.answer_s({"max_tokens": 4000}) == 60 + 800
    assert timeouts.answer_s({"max_completion_tokens": 100, "max_tokens": 4000}) == 60 + 20
    for limit in (None, 0):
        assert timeouts.answer_s({"max_tokens": limit}) == 60 + DEFAULT_OUTPUT_TOKENS / 5
    for limit in (-5, True, "9", math.nan, math.inf):  # review R61: refused, as the router refuses them
        with pytest.raises(DispatchError, match=r"^max_tokens must be a whole number"):
            timeouts.answer_s({"max_tokens": limit})
    assert Timeouts().answer_s({}) == 60 + DEFAULT_OUTPUT_TOKENS / 5


@pytest.mark.parametrize("rate", [0, -1, math.nan, math.inf])
def test_a_decode_rate_that_is_not_positive_and_finite_is_refused(rate: float) -> None:
    with pytest.raises(InputError, match="decode_tokens_per_s"):
        Timeouts(decode_tokens_per_s=rate)
