"""At shutdown, a chat call whose body is still being read in its worker step (parsed, hashed, its
prompt estimated) when the grace runs out is cut: answered 503 ``shutting_down``, nothing
decided, audited or charged, as a call whose decision had not begun is (review R90; a regression
review of R91).

R91 moved the body's reading into the decision's worker step (``Gateway._read_and_decide``). A
step begun runs to its end, so the shutdown's cut, arriving while the body was read, was spent
on a step that had not decided anything yet: the call was then decided and audited during the
shutdown all the same; a malformed body's refusal audited and answered 400, a call allowed made
its reservation, released it and audited ``GatewayStopped``, a call with no credentials was
answered 401. Before R91 the reading ran on the loop, and the decision, not begun, was called
off."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from test_gateway import Env, _body

from agentgate.dispatch.gateway import Gateway, GatewayServer, _app, invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize("kind", ["malformed", "allowed", "no_credentials"])
def test_a_call_whose_body_is_being_read_at_shutdown_is_cut_undecided(
    env: Env, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=0)
    server.start()
    body = _body(n=2) if kind == "malformed" else _body()
    headers = {"content-type": "application/json"}
    if kind == "allowed":
        headers.update(invocation_headers(env.agent.key, env.agent.chain, body))
    elif kind == "malformed":
        headers["Authorization"] = f"Bearer {env.agent.chain.token}"
    # The body's reading holds its worker step until released; the shutdown's cut is seen by
    # the step's caller (``_StepStart.call_off``) before the reading ends.
    reading, cut, release = threading.Event(), threading.Event(), threading.Event()
    read, call_off = _app.read_chat_request, _app._StepStart.call_off

    def held(raw: bytes) -> Any:
        reading.set()
        release.wait(10)
        return read(raw)

    def calling_off(start: Any) -> bool:
        cut.set()
        return call_off(start)

    monkeypatch.setattr(_app, "read_chat_request", held)
    monkeypatch.setattr(_app._StepStart, "call_off", calling_off)
    answers: list[httpx.Response] = []

    def call() -> None:
        answers.append(
            httpx.post(
                f"{server.url}/chat/completions",
                content=json.dumps(body).encode(),
                headers=headers,
                timeout=10,
            )
        )

    before = len(env.entries())
    caller = threading.Thread(target=call)
    stopper = threading.Thread(target=server.stop)
    try:
        caller.start()
        assert reading.wait(5), "the body was never read"
        stopper.start()
        assert cut.wait(5), "the shutdown never cut the call"
    finally:
        release.set()
        caller.join(10)
        stopper.join(15)
    [answer] = answers
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "shutting_down"), answer.text
    assert "cut before it was decided; nothing was charged" in answer.json()["error"]["message"]
    assert answer.headers["connection"] == "close"
    calls = env.entries()[before:]
    assert calls == [], [(e.kind, e.reasons) for e in calls]
    assert env.gate.verify().ok
