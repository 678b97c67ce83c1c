"""SIGHUP stops ``agentgate serve`` as SIGTERM does, unless it was ignored at start (review R96,
docs/cli.md, docs/gateway.md).

SIGHUP is what a gateway in a terminal or an ``ssh host agentgate serve`` session gets when that
closes, and some supervisors send it. Until review R96 ``serve`` left it to its default action:
the process died at once, a call in flight had an allow with no outcome and its reservation was
left held. Now it begins the shutdown grace, settles the calls in flight and exits 0; under
``nohup`` (SIGHUP ignored at start) the gateway goes on serving.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import _http
import httpx
from test_cli_signals import (  # noqa: F401 (chat_world: a fixture)
    ENV,
    ROOT,
    _chat_requests,
    chat_world,
    serve_command,
)
from test_gateway import _free_port, wait_until_serving
from test_gateway_stall import MODEL

from agentgate.dispatch.gateway import GatewayGate, invocation_headers
from agentgate.sim import SimServer

# How long the server must go on answering after an ignored SIGHUP (a stop would begin at
# uvicorn's next tick, 0.1 s, and with no grace stop listening at once).
WATCH_S = 0.6

_World = tuple[Path, Path, Path, SimServer, GatewayGate, Any]


def test_sighup_stops_the_gateway_as_sigterm_does_and_settles_the_call_in_flight(chat_world: _World) -> None:  # noqa: F811
    *_, sim, issuer, agent = chat_world
    sim.fault = "hang"  # accepts the request, never answers
    port = _free_port()
    process = subprocess.Popen(
        serve_command(chat_world, port, grace=0), stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT
    )
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    answer: dict[str, Any] = {}

    def call() -> None:
        headers = invocation_headers(agent.key, agent.chain, body)
        try:
            response = _http.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers=headers, timeout=30
            )
            answer["status"], answer["body"] = response.status_code, json.loads(response.content)
        except httpx.HTTPError as exc:
            answer["error"] = repr(exc)

    caller = threading.Thread(target=call, daemon=True)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", process)
        caller.start()
        deadline = time.monotonic() + 20
        while _chat_requests(sim) == 0:
            assert caller.is_alive() and time.monotonic() < deadline, ("never reached the backend", answer)
            time.sleep(0.01)
        process.send_signal(signal.SIGHUP)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=20)
    caller.join(30)
    assert process.returncode == 0, err  # before R96: -1, killed by SIGHUP
    assert answer.get("status") == 503 and answer["body"]["error"]["code"] == "shutting_down", answer
    issuer.flush()
    outcomes = [e for e in issuer.audit.entries() if e.kind == "outcome"]
    assert len(outcomes) == 1 and "GatewayStopped" in outcomes[0].reasons[0], outcomes
    states = [row[0] for row in issuer.store.query("SELECT state FROM budget_reservations")]
    assert states == ["committed"], states  # none left held


def test_sighup_ignored_at_start_as_nohup_does_leaves_the_gateway_serving(chat_world: _World) -> None:  # noqa: F811
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        serve_command(chat_world, port, grace=0),
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # as nohup does
    )
    try:
        wait_until_serving(base, process)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            assert process.poll() is None, "the ignored SIGHUP stopped the gateway"
            assert _http.get(base + "/healthz").status_code == 200
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=20)
    assert process.returncode == 0, err
