"""A chat call's decision (or refusal) never runs on the gateway's event loop, even when it is the
only call in flight: a decision waiting for the store's write lock leaves ``/healthz`` answering
(review R89).

Until R89 ``Gateway._blocking`` ran the step inline on the loop when no other chat call was in
flight. The step is the store transaction: with another connection holding SQLite's write lock
(an ``agentgate`` CLI verb, a second process on the file) it waited up to the busy timeout, 30 s
by default, and the whole gateway stopped meanwhile: ``/healthz`` and ``/metrics`` got no
answer, no connection was read, the shutdown was not processed. A liveness probe on ``/healthz``
then had the process restarted."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from test_gateway import Env, _body, _post

from agentgate.dispatch.gateway import invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _while_deciding(env: Env, monkeypatch: pytest.MonkeyPatch, step: str) -> threading.Event:
    """An event set once the gate's ``step`` has begun (its store write then waits for the lock)."""
    begun = threading.Event()
    original = getattr(env.gate, step)

    def deciding(*args: Any, **kwargs: Any) -> Any:
        begun.set()
        return original(*args, **kwargs)

    monkeypatch.setattr(env.gate, step, deciding)
    return begun


@pytest.mark.parametrize(
    ("step", "valid", "status"),
    [("authorize_invocation", True, 200), ("refuse", False, 400)],
    ids=["decision", "refusal"],
)
def test_healthz_answers_while_the_only_call_in_flight_waits_for_the_store_lock(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, valid: bool, status: int
) -> None:
    body = _body() if valid else {**_body(), "messages": "not a list"}
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    begun = _while_deciding(env, monkeypatch, step)
    answers: list[httpx.Response] = []
    locker = sqlite3.connect(tmp_path / "agentgate.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another connection holds the store's write lock
    caller = threading.Thread(target=lambda: answers.append(_post(env, json.dumps(body).encode(), headers)))
    try:
        caller.start()
        assert begun.wait(5), f"the gateway never began its {step}"
        assert env.server.gateway._in_flight == 1  # the only chat call: the case that ran inline
        try:
            health = _http.get(env.base_url.removesuffix("/v1") + "/healthz", timeout=1.0)
        except httpx.TimeoutException:
            pytest.fail(f"/healthz got no answer while the only call's {step} waited for the store lock")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert caller.is_alive() and not answers  # the call was still waiting for the lock
    finally:
        locker.execute("ROLLBACK")
        locker.close()
        caller.join(30)
    assert [a.status_code for a in answers] == [status], [a.text[:300] for a in answers]
    assert [e.kind for e in env.entries()] == (["allow", "outcome"] if valid else ["deny"])
