"""The dispatcher's request ids (agentgate/dispatch/dispatcher.py): an id is refused while a call
holding it is in flight, an automatic id never collides with a caller's, an id that is not text
gets a ``DispatchError``, and an id is free again however its call ended (a stream abandoned, a
call cancelled, failed over, or failed on every backend). Real ``SimServer`` backends.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.errors import DispatchError
from agentgate.sim import SimServer

MODEL = "llama-3.1-8b"


def _body(tokens: int) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "x " * 20}], "max_tokens": tokens}


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_a_call_without_an_id_is_not_refused_for_a_callers_id() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            held = dispatcher.stream(_body(200), request_id="req-0")
            try:
                await held.__anext__()
                result = await dispatcher.chat(_body(2))
                assert result.usage.completion_tokens == 2
            finally:
                await held.aclose()


async def test_an_abandoned_stream_and_a_cancelled_call_release_their_id() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        router = Router(inventory)
        async with Dispatcher(inventory, router) as dispatcher:
            stream = dispatcher.stream(_body(200), request_id="mine")
            async for _chunk in stream:
                break
            await stream.aclose()
            task = asyncio.create_task(dispatcher.chat(_body(500), request_id="mine"))
            for _ in range(3):
                await asyncio.sleep(0)
            with pytest.raises(DispatchError, match="already in flight"):
                await dispatcher.chat(_body(2), request_id="mine")  # the first one holds it
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            result = await dispatcher.chat(_body(2), request_id="mine")
            assert result.usage.completion_tokens == 2
            assert router.in_flight("a") == 0


async def test_a_request_id_that_is_not_text_gets_a_typed_error() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            with pytest.raises(DispatchError, match="request_id must be text"):
                await dispatcher.stream(_body(200), request_id=7).__anext__()  # type: ignore[arg-type]
            with pytest.raises(DispatchError, match="request_id must be text"):
                await dispatcher.chat(_body(2), request_id=7)  # type: ignore[arg-type]


async def test_an_id_is_free_again_after_failover_and_after_every_backend_failed() -> None:
    dead = _dead_url()
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {"name": "dead", "url": dead, "models": [MODEL]},
                    {"name": "live", "url": sim.url, "models": [MODEL]},
                ]
            }
        )
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            for _ in range(3):  # whichever backend is tried first, the id is released
                result = await dispatcher.chat(_body(2), request_id="mine")
                assert result.usage.completion_tokens == 2
    lone = inventory_from_mapping({"backends": [{"name": "dead", "url": dead, "models": [MODEL]}]})
    async with Dispatcher(lone, Router(lone)) as dispatcher:
        for _ in range(2):
            with pytest.raises(DispatchError) as failed:
                await dispatcher.chat(_body(2), request_id="mine")
            assert "already in flight" not in str(failed.value)
