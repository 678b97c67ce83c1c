"""Stopping a ``SimServer`` on purpose (review R62): it logs no traceback.

``SimServer.stop`` is uvicorn's forced exit (calls in flight are cut off), which skipped the
app's lifespan shutdown: the lifespan task, left waiting for it, was cancelled by the event
loop's end, and uvicorn logged a ``CancelledError`` traceback ("Exception in 'lifespan'
protocol") for each simulator stopped, seen at the teardown of every module fixture that stops
one (uvicorn's ``uvicorn.error`` logger is shared: a ``GatewayServer`` started later sets it to
WARNING, so the simulator's own ``critical`` does not hide it)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from agentgate.sim import SimServer


@contextlib.contextmanager
def _uvicorn_log(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """uvicorn's error log at WARNING, captured. Entered after
    the server started: uvicorn's ``Config`` replaces the logger's handlers."""
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_simulator_stopped_on_purpose_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Review R62: stopping an idle simulator logged "Exception in 'lifespan' protocol" with a
    ``CancelledError`` traceback; it logs nothing."""
    server = SimServer(model_name="m", time_scale=0.01).start()
    with _uvicorn_log(caplog):
        server.stop()
    assert _warnings(caplog) == []


def test_a_simulator_stopped_with_a_stream_in_flight_cuts_it_and_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review R62: a stream in flight is cut off (its connection closed) and nothing is logged."""
    server = SimServer(model_name="m", time_scale=1.0).start()
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2000,"stream":true}'
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with _uvicorn_log(caplog), socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        received = b""
        while piece := sock.recv(65536):
            received += piece
        stopper.join()
    assert b"[DONE]" not in received
    assert _warnings(caplog) == []
