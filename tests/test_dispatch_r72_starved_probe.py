"""A health probe whose verdict the gateway's own event loop spoiled (review R72).

Real loopback HTTP: a small threaded backend that answers ``/health`` 200 after 50 ms, probed by a
real ``Dispatcher``; the dispatcher's event loop is then held (``time.sleep`` on it, as a process
starved of CPU is) while a probe is out.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router

PROBE_S = 0.3


class _Healthy(http.server.BaseHTTPRequestHandler):
    """``GET`` anything: 200 after ``delay`` seconds (50 ms: well within ``PROBE_S``; 60 s: a
    backend that hangs); ``asked`` set on each probe. Once ``released`` (the test over), a
    request still waiting ends unanswered: its answer, written 60 s later to a connection the
    dispatcher had closed, printed a ``BrokenPipeError`` traceback into the stderr of whatever
    test the worker ran then, which failed it (review R80)."""

    protocol_version = "HTTP/1.1"
    asked = threading.Event()
    released = threading.Event()
    delay = 0.05
    handlers: ClassVar[list[threading.Thread]] = []

    def do_GET(self) -> None:
        self.handlers.append(threading.current_thread())
        self.asked.set()
        if self.released.wait(self.delay):
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serving(delay: float = 0.05) -> Iterator[str]:
    """The backend on loopback, answering after ``delay``; its URL."""
    _Healthy.delay = delay
    _Healthy.released.clear()
    _Healthy.asked.clear()
    _Healthy.handlers.clear()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Healthy)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _Healthy.released.set()
        server.shutdown()
        server.server_close()
        _Healthy.delay = 0.05


@pytest.fixture
def healthy() -> Iterator[str]:
    with _serving() as url:
        yield url


def _dispatcher(url: str) -> Dispatcher:
    inventory = Inventory.model_validate(
        {"backends": [{"name": "b", "url": url, "engine": "vllm", "models": ["m"]}]}
    )
    # A cooldown longer than the test: a backend marked down stays down.
    return Dispatcher(inventory, Router(inventory), timeouts=Timeouts(probe_s=PROBE_S), cooldown_s=600)


async def _probe_out() -> None:
    """Return once a new probe has reached the backend."""
    _Healthy.asked.clear()
    while not _Healthy.asked.is_set():
        await asyncio.sleep(0.001)


async def test_a_probe_answered_in_time_while_the_loop_was_starved_does_not_mark_the_backend_down(
    healthy: str,
) -> None:
    """Review R72: the loop held past ``probe_s`` while a probe was out, the probe's timeout and
    the backend's answer (in 50 ms) were both due when it ran again, and the timeout won: a
    healthy backend was marked down, for ``cooldown_s`` at least, and a call then found no
    backend (a gateway on a loaded machine answered 503 no_backend). A probe that took longer
    than its own limit allows says that the loop was late, not that the backend was."""
    dispatcher = _dispatcher(healthy)
    async with dispatcher:
        await _probe_out()
        time.sleep(PROBE_S + 0.2)  # the loop starved; the answer comes meanwhile
        for _ in range(2):  # the late probe's verdict taken, and the next probes sent
            await _probe_out()
        assert dispatcher.router.states["b"].healthy, "a healthy backend was marked down"


async def test_a_backend_whose_probe_hangs_while_the_loop_is_starved_is_still_marked_down(
    healthy: str,
) -> None:
    """The other side of the rule above: a late probe is sent again, not forgiven, and a backend
    that does not answer the second one either is marked down."""
    _Healthy.delay = 60
    dispatcher = _dispatcher(healthy)
    async with dispatcher:
        await _probe_out()
        time.sleep(PROBE_S + 0.2)  # the loop starved while a probe of a hung backend is out
        deadline = time.monotonic() + 10  # a bound on a failing test: two probes take 0.6 s
        while dispatcher.router.states["b"].healthy:
            assert time.monotonic() < deadline, "a backend whose probes hang was never marked down"
            await asyncio.sleep(0.01)


def test_a_request_still_waiting_when_the_backend_stops_ends_unanswered_at_once() -> None:
    """Review R80: the hung backend's handler slept its 60 s after its test, then wrote to a
    closed connection, and the traceback it printed failed an unrelated test in the same worker."""
    with _serving(delay=60) as url, socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as c:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: b\r\n\r\n")
        assert _Healthy.asked.wait(10)
    deadline = time.monotonic() + 10
    while any(handler.is_alive() for handler in _Healthy.handlers):
        assert time.monotonic() < deadline, "a handler still waits after the backend stopped"
        time.sleep(0.01)
