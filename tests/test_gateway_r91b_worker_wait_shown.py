"""A chat call's wait for a worker thread is shown as such: its own ``Server-Timing`` stage
(``wait``) and its own histogram (``agentgate_gateway_worker_wait_seconds``), never counted as the
body's parse nor as the decision (a regression review of R91).

R91 moved a chat body's reading into the decision's worker step. Large bodies sent without
credentials then fill every worker thread while they are read, and an authenticated call waits
for one: that wait was reported as ``parse`` (13 s for a 60-byte body), and
``agentgate_gateway_decision_seconds``, which had counted it before R91, no longer saw it at all."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from test_gateway import Env, _body

from agentgate.dispatch.gateway import Gateway, GatewayServer, _app, invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

HELD_S = 0.3
"""How long the only worker thread is held after the authenticated call's step is handed to it."""


class _OneWorker(ThreadPoolExecutor):
    """The serving loop's default executor, one worker thread, counting the steps handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = threading.Semaphore(0)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted.release()
        return future


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url.removesuffix("/v1") + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")


def test_an_authenticated_calls_wait_for_a_worker_is_shown_as_a_wait(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = Gateway(env.gate, env.server.gateway.inventory)
    pool = _OneWorker()
    started = gateway.dispatcher.start

    async def start_with_one_worker() -> None:
        asyncio.get_running_loop().set_default_executor(pool)
        await started()

    monkeypatch.setattr(gateway.dispatcher, "start", start_with_one_worker)
    server = GatewayServer(gateway, port=0).start()
    # A body with no credentials holds the only worker while it is read, until released.
    reading, release = threading.Event(), threading.Event()
    read = _app.read_chat_request

    def held(raw: bytes) -> Any:
        if not reading.is_set():
            reading.set()
            release.wait(10)
        return read(raw)

    monkeypatch.setattr(_app, "read_chat_request", held)
    url = f"{server.url}/chat/completions"
    body = _body()
    raw = json.dumps(body).encode()
    answers: dict[str, httpx.Response] = {}

    def call(name: str, headers: dict[str, str]) -> None:
        answers[name] = httpx.post(
            url, content=raw, headers={"content-type": "application/json", **headers}, timeout=10
        )

    unauthenticated = threading.Thread(target=call, args=("no credentials", {}))
    signed = invocation_headers(env.agent.key, env.agent.chain, body)
    authenticated = threading.Thread(target=call, args=("signed", signed))
    try:
        unauthenticated.start()
        assert reading.wait(5) and pool.submitted.acquire(timeout=5)
        authenticated.start()
        assert pool.submitted.acquire(timeout=5), "the signed call's step was never handed off"
        threading.Event().wait(HELD_S)  # the signed call's step waits for the worker meanwhile
    finally:
        release.set()
        unauthenticated.join(10)
        authenticated.join(10)
    try:
        assert answers["no credentials"].status_code == 401
        answer = answers["signed"]
        assert answer.status_code == 200, answer.text
        timing = dict(part.strip().split(";dur=") for part in answer.headers["server-timing"].split(","))
        assert list(timing) == ["read", "wait", "parse", "decide", "backend", "total"]
        # The wait is its own stage: at least the time the worker was held after the hand-off.
        assert float(timing["wait"]) >= HELD_S * 1000, timing
        assert _metric(server.url, "agentgate_gateway_worker_wait_seconds_sum") >= HELD_S
        assert _metric(server.url, "agentgate_gateway_worker_wait_seconds_count") >= 2
    finally:
        server.stop()
        pool.shutdown()
