"""At shutdown, a chat call whose decision has not begun (it waits for a worker thread, every one
busy) is cut: answered 503 ``shutting_down``, nothing decided, audited or charged, as
docs/gateway.md says; only a decision already under way is waited for (review R90).

Until R90 ``Gateway._blocking`` never called a step off: a call queued behind busy workers was
decided once a worker freed up, during the shutdown, its allow audited and its reservation made
and released, and the shutdown waited for each such decision in turn (each maybe waiting out the
store's busy timeout while another process held SQLite's write lock)."""

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

from agentgate.dispatch.gateway import Gateway, GatewayServer, invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


class _OneWorker(ThreadPoolExecutor):
    """The serving loop's default executor, one worker thread, counting the steps handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = threading.Semaphore(0)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted.release()
        return future


def test_a_call_whose_decision_has_not_begun_at_shutdown_is_cut_undecided(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = Gateway(env.gate, env.server.gateway.inventory)
    pool = _OneWorker()
    started = gateway.dispatcher.start

    async def start_with_one_worker() -> None:
        asyncio.get_running_loop().set_default_executor(pool)
        await started()

    monkeypatch.setattr(gateway.dispatcher, "start", start_with_one_worker)
    server = GatewayServer(gateway, port=0, shutdown_grace_s=0).start()
    url = server.url
    # The first decision holds the only worker until released: the second waits for it.
    decide = env.gate.authorize_invocation
    first_begun, release = threading.Event(), threading.Event()

    def held_first(*args: Any, **kwargs: Any) -> Any:
        if not first_begun.is_set():
            first_begun.set()
            release.wait(10)
        return decide(*args, **kwargs)

    monkeypatch.setattr(env.gate, "authorize_invocation", held_first)
    answers: dict[str, httpx.Response] = {}

    def call(name: str) -> None:
        body = _body(messages=[{"role": "user", "content": name}])
        headers = invocation_headers(env.agent.key, env.agent.chain, body)
        answers[name] = httpx.post(
            f"{url}/chat/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", **headers},
            timeout=10,
        )

    before = env.entries()
    under_way = threading.Thread(target=call, args=("under way",))
    queued = threading.Thread(target=call, args=("queued",))
    stopper = threading.Thread(target=server.stop)
    try:
        under_way.start()
        assert first_begun.wait(5) and pool.submitted.acquire(timeout=5)
        queued.start()
        assert pool.submitted.acquire(timeout=5), "the second call's decision was never handed off"
        stopper.start()
        # Cut at once (grace 0), while the decision under way still holds the only worker.
        queued.join(5)
        assert not queued.is_alive(), "the queued call waited for the decision under way"
    finally:
        release.set()
        under_way.join(10)
        queued.join(10)
        stopper.join(15)
    cut = answers["queued"]
    assert (cut.status_code, cut.json()["error"]["code"]) == (503, "shutting_down"), cut.text
    assert "cut before it was decided" in cut.json()["error"]["message"]
    sent = answers["under way"]
    assert (sent.status_code, sent.json()["error"]["code"]) == (503, "shutting_down"), sent.text
    # One decision (the one under way), settled unsent; nothing of the queued call.
    calls = env.entries()[len(before) :]
    assert [e.kind for e in calls] == ["allow", "outcome"], [(e.kind, e.reasons) for e in calls]
    assert "GatewayStopped" in calls[1].reasons
    assert env.gate.verify().ok
