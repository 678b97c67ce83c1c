"""A backend busy serving calls whose health probe is slow once (longer than ``probe_s``, as a
loaded engine's ``/health`` can be) stays in the rotation: the probe failed while the backend
answered calls. Until review R62 that one probe marked it down, and the calls routed to it then
failed over or waited for it (12 of 30 failed with one backend). A backend that fails its probes
while answering nothing is still marked down."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

import pytest
from test_broker_library_use import SlowBackend, _inventory, _payload

from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router

PROBE_S = 0.3


def _probes_answered_by(backend: SlowBackend, answer: Callable[[int], int | None]) -> list[int]:
    """Make ``backend``'s ``GET /health`` answer with ``answer(n)`` for the n-th probe (1 first):
    a status, or ``None`` for 200 after ``2 * PROBE_S`` (a probe that times out); the others (the
    metrics scrapes) as before. Returns the list of probe numbers seen."""
    handler = backend.server.RequestHandlerClass
    served = handler.do_GET  # type: ignore[attr-defined]
    seen: list[int] = []
    lock = threading.Lock()

    def do_get(self: object) -> None:
        if getattr(self, "path", "") != "/health":
            served(self)
            return
        with lock:
            seen.append(len(seen) + 1)
            n = seen[-1]
        status = answer(n)
        if status is None:
            time.sleep(2 * PROBE_S)
            status = 200
        with contextlib.suppress(OSError):
            self.send_response(status)  # type: ignore[attr-defined]
            self.send_header("content-length", "2")  # type: ignore[attr-defined]
            self.end_headers()  # type: ignore[attr-defined]
            self.wfile.write(b"ok")  # type: ignore[attr-defined]

    handler.do_GET = do_get  # type: ignore[attr-defined]
    return seen


async def test_a_slow_probe_of_a_backend_answering_calls_does_not_take_it_out() -> None:
    slow = SlowBackend(0.1)
    probes = _probes_answered_by(slow, lambda n: None if n == 2 else 200)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(
            inv, Router(inv), timeouts=Timeouts(probe_s=PROBE_S), health_interval_s=0.05
        ) as d:
            downs: list[float] = []

            async def watch() -> None:
                while True:
                    if d.is_down("b0"):
                        downs.append(time.monotonic())
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            results = await asyncio.gather(
                *(d.chat(_payload(i), priority=0, slo_ttft_s=5.0) for i in range(30)),
                return_exceptions=True,
            )
            watcher.cancel()
        assert len(probes) >= 3, probes  # the slow probe (the second) was sent and answered late
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert downs == [] and slow.posts == 30
    finally:
        slow.stop()


@pytest.mark.parametrize(
    "answer",
    [lambda n: 503 if n >= 2 else 200, lambda n: None if n == 2 else 200],
    ids=["failing", "slow-once"],
)
async def test_a_backend_answering_nothing_is_marked_down_by_a_failed_or_slow_probe(
    answer: Callable[[int], int | None],
) -> None:
    slow = SlowBackend(0.1)
    probes = _probes_answered_by(slow, answer)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(
            inv, Router(inv), timeouts=Timeouts(probe_s=PROBE_S), health_interval_s=0.05
        ) as d:
            async with asyncio.timeout(5):
                while not d.is_down("b0"):
                    await asyncio.sleep(0.01)
        assert len(probes) >= 2
    finally:
        slow.stop()
