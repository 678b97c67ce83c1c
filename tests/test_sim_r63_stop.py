"""Stopping a ``SimServer`` with a request that never ends in flight (review R63).

The ``hang`` fault's handler sleeps an hour and watches no disconnect: ``stop`` reset its
connection, then waited 5 s for its task before going on, so every test that left a hung request
behind paid 5 s at its simulator's stop. A real simulator on loopback, a raw socket as its caller."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from agentgate.sim import SimServer

_CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}'
_REQUESTS = {
    "chat": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(_CHAT) + _CHAT,
    "health": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.fixture
def uvicorn_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """What uvicorn's error log receives at WARNING and above while the test runs."""
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(caplog.handler)
    try:
        yield caplog.records
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


def _hung_handlers(server: SimServer) -> int:
    """How many requests the server is still handling (their tasks not done)."""
    assert server._server is not None
    return sum(not task.done() for task in server._server.server_state.tasks)


@pytest.mark.parametrize("path", sorted(_REQUESTS))
def test_a_stop_cancels_a_hung_request_at_once_and_logs_nothing(
    path: str, uvicorn_warnings: list[logging.LogRecord]
) -> None:
    """Review R63: a stop with a ``hang`` request in flight took 5 s (it waited for a handler that
    sleeps an hour); the request is cancelled, its caller sees the connection closed, the stop
    returns before the 4 s the defect's 5 s wait exceeds (no tighter timing: a loaded machine's
    is not the code's) and nothing is logged."""
    server = SimServer(model_name="m", time_scale=0.01).start()
    server.fault = "hang"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_REQUESTS[path])
        deadline = time.monotonic() + 5
        while _hung_handlers(server) == 0:
            assert time.monotonic() < deadline, "the request never reached its handler"
            time.sleep(0.01)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        stopper.join(timeout=4.0)
        try:
            answer = sock.recv(65536)
        except ConnectionResetError:
            answer = b""
    assert not stopper.is_alive(), "stop() still waits for the hung request"
    assert answer == b""
    assert [r.getMessage() for r in uvicorn_warnings if r.levelno >= logging.WARNING] == []
