"""Faults over real HTTP on loopback: simulated vLLM servers, the real client, router and dispatcher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.baselines import RoundRobinRouter
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed
from agentgate.sim import SimServer

MODEL = "llama-3.1-8b"


@pytest.fixture
def servers() -> Iterator[list[SimServer]]:
    started = [SimServer(time_scale=0.1, scrape_lag_s=0.2).start() for _ in range(4)]
    yield started
    for server in started:
        server.stop()


def inventory(servers: list[SimServer]) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {
                    "name": f"b{i}",
                    "url": s.url,
                    "engine": "vllm",
                    "models": [MODEL],
                    "metrics_url": s.url + "/metrics",
                    "kv_capacity_tokens": 400_000,
                }
                for i, s in enumerate(servers)
            ]
        }
    )


def payload(i: int, max_tokens: int = 100) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"request {i}: " + "lorem ipsum " * 40}],
        "max_tokens": max_tokens,
    }


async def wait_for(condition: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``condition()`` holds; fails the test after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.slow
async def test_backend_killed_mid_replay_loses_no_request_and_is_used_again(servers: list[SimServer]) -> None:
    inv = inventory(servers)
    timeouts = Timeouts(connect_s=2.0, first_token_s=10.0, idle_s=5.0, probe_s=1.0)
    async with Dispatcher(inv, Router(inv), timeouts=timeouts, health_interval_s=0.1, cooldown_s=0.3) as d:

        async def call(i: int) -> str:
            await asyncio.sleep(i * 0.01)
            result = await d.chat(payload(i), slo_ttft_s=30.0, priority=0)
            return result.backend

        replay = [asyncio.create_task(call(i)) for i in range(80)]
        victim = servers[2]
        # It dies carrying work: killed once it has taken a request (0.25 s on a quiet machine).
        await wait_for(lambda: victim.served > 0, timeout=10.0)
        await asyncio.to_thread(victim.kill)
        # Marked down by its refused connections and health probes (every 0.1 s), long before
        # any timeout of a request to it could (idle 5 s, first token 10 s); the bound leaves a
        # loaded machine room and still tells the two apart.
        await wait_for(lambda: d.is_down("b2"), timeout=4.0)
        results = await asyncio.wait_for(asyncio.gather(*replay), timeout=30)
        assert len(results) == 80  # every request completed, some after failing over
        assert set(results) <= {"b0", "b1", "b2", "b3"}

        await asyncio.to_thread(victim.revive)
        await wait_for(lambda: not d.is_down("b2"), timeout=3.0)
        again = await asyncio.gather(*(d.chat(payload(1000 + i, 10), slo_ttft_s=30.0) for i in range(24)))
        assert "b2" in {r.backend for r in again}
        assert victim.served > 0


async def test_hanging_backend_times_out_and_fails_over(servers: list[SimServer]) -> None:
    servers[0].fault = "hang"
    inv = inventory(servers[:2])
    timeouts = Timeouts(connect_s=0.5, first_token_s=0.4, idle_s=0.4, probe_s=0.3)
    async with Dispatcher(inv, RoundRobinRouter(inv), timeouts=timeouts, health_interval_s=0.1) as d:
        start = time.monotonic()
        result = await d.chat(payload(1, 5))
        elapsed = time.monotonic() - start
        assert result.backend == "b1"
        # Cut by its 0.4 s timeouts (about 0.5 s in all), not left to hang for ever or to the
        # default timeouts (60 s to a first token): the bound tells the two apart on a loaded machine.
        assert elapsed < 6.0
        assert d.is_down("b0")


@pytest.mark.parametrize("stream", [False, True])
async def test_garbage_answer_is_backend_failed_and_fails_over(
    servers: list[SimServer], stream: bool
) -> None:
    servers[0].fault = "garbage"
    inv = inventory(servers[:2])
    async with Dispatcher(inv, RoundRobinRouter(inv), timeouts=Timeouts(probe_s=0.3)) as d:
        if stream:
            chunks = [c async for c in d.stream(payload(2, 4))]
            assert "".join(c.content for c in chunks).count("tok") == 4
        else:
            assert (await d.chat(payload(2, 4))).backend == "b1"
        assert d.is_down("b0")


async def test_client_maps_garbage_and_hang_to_backend_failed(servers: list[SimServer]) -> None:
    import _http

    inv = inventory(servers[:1])
    async with _http.AsyncClient() as http:
        client = BackendClient(inv.backends[0], http, Timeouts(first_token_s=0.3, idle_s=0.3, probe_s=0.3))
        servers[0].fault = "garbage"
        with pytest.raises(BackendFailed, match="malformed"):
            await client.chat(payload(3, 2))
        with pytest.raises(BackendFailed):
            _ = [c async for c in client.stream(payload(3, 2))]
        servers[0].fault = "hang"
        start = time.monotonic()
        with pytest.raises(BackendFailed):
            await client.chat(payload(3, 2))
        assert time.monotonic() - start < 5.0  # cut by its 0.3 s timeouts, not a hang (for ever, or 60 s)
        assert await client.health() is False
        servers[0].fault = "none"
        assert (await client.chat(payload(3, 2))).usage.completion_tokens == 2


async def test_metrics_down_falls_back_to_in_flight_accounting(servers: list[SimServer]) -> None:
    for server in servers[:2]:
        server.fault = "metrics_down"
    inv = inventory(servers[:2])
    router = Router(inv, metrics_max_age_s=0.5)
    async with Dispatcher(inv, router, scrape_interval_s=0.1) as d:
        results = await asyncio.gather(*(d.chat(payload(i, 50), slo_ttft_s=30.0) for i in range(40)))
        assert all(router.states[b].fresh_load(time.monotonic()) is None for b in ("b0", "b1"))
        counts = {b: sum(r.backend == b for r in results) for b in ("b0", "b1")}
        assert min(counts.values()) >= 8, counts  # balanced by the router's own in-flight counts
        servers[0].fault = "none"
        await wait_for(lambda: router.states["b0"].fresh_load(time.monotonic()) is not None, timeout=5.0)
