"""``GatewayServer.start()`` called again while it serves starts no second thread, and a stopped
server does not start again (review R85).

Until R85 each ``start`` started another thread running the one uvicorn server and returned
"started" at once (the server's flag was already set): ``stop()`` joined only the last thread,
waited out its whole timeout (``shutdown_grace_s`` + 10 s), and returned with both threads still
serving the port. A ``start`` after ``stop`` likewise returned "started" for a server that was
shutting down."""

from __future__ import annotations

import threading

import _http
import httpx
import pytest
from test_gateway import Env

from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.errors import DispatchError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def test_a_second_start_keeps_the_one_thread_that_stop_then_ends(env: Env) -> None:
    before = set(threading.enumerate())
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=0)
    assert server.start() is server
    port = server.port
    assert server.start() is server and server.port == port
    threads = set(threading.enumerate()) - before
    assert [t.name for t in threads if t.name.startswith("gateway-")] == ["gateway-0"]
    assert _http.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    server.stop()
    assert not any(t.is_alive() for t in threads if t.name.startswith("gateway-"))
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_stopped_server_refuses_to_start_again(env: Env) -> None:
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=0)
    server.start()
    server.stop()
    before = set(threading.enumerate())
    with pytest.raises(
        DispatchError, match=r"was stopped and does not start again: serve with a new GatewayServer"
    ):
        server.start()
    assert set(threading.enumerate()) - before == set()
