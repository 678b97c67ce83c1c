"""The dispatcher over real HTTP: streaming, cancellation, accounting, and refusals."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.errors import DispatchError, NoBackend
from agentgate.sim import SimServer

MODEL = "llama-3.1-8b"


async def test_stream_cancelled_by_the_caller_frees_the_backend_and_the_count() -> None:
    with SimServer(time_scale=0.1) as server:
        inv = inventory_from_mapping({"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]})
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}
            stream = d.stream(body)
            async for chunk in stream:
                assert chunk.content.startswith("tok")
                break
            await stream.aclose()
            assert router.in_flight("b0") == 0
            deadline = time.monotonic() + 3
            while server.engine.has_work() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not server.engine.has_work()


async def test_completed_calls_leave_no_in_flight_work_and_report_usage() -> None:
    with SimServer(time_scale=0.05) as a, SimServer(time_scale=0.05) as b:
        inv = inventory_from_mapping(
            {"backends": [{"name": n, "url": s.url, "models": [MODEL]} for n, s in (("a", a), ("b", b))]}
        )
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "x " * 200}], "max_tokens": 3}
            results = await asyncio.gather(*(d.chat(body, slo_ttft_s=10.0) for _ in range(10)))
            assert all(r.usage.completion_tokens == 3 for r in results)
            assert router.in_flight("a") == router.in_flight("b") == 0


async def test_refusals_are_typed() -> None:
    with SimServer(time_scale=0.05) as server:
        inv = inventory_from_mapping({"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]})
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            with pytest.raises(DispatchError, match="messages"):
                await d.chat({"model": MODEL, "messages": []})
            with pytest.raises(NoBackend, match="serves model"):
                await d.chat({"model": "other", "messages": [{"role": "user", "content": "x"}]})
            with pytest.raises(NoBackend, match="may use none"):
                await d.chat(
                    {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, allowed=lambda b: False
                )
