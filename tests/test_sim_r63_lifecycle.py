"""A ``SimServer``'s start and stop as a program that embeds it calls them (review R63).

A real simulator on loopback; the port held by a real listening socket."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import _http
import httpx
import pytest

from agentgate.errors import DispatchError, InputError
from agentgate.sim import SimServer


@pytest.fixture
def held_port() -> Iterator[socket.socket]:
    """A loopback port another server listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder


def test_a_port_in_use_is_a_typed_error_naming_it_and_a_later_start_serves(
    held_port: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R63: ``start`` on a port in use raised a bare ``RuntimeError`` ("did not start",
    uvicorn's own bind error logged apart at ERROR) and kept the dead server's thread, so that a
    ``start`` once the port was free returned at once and served nothing. It is a
    ``DispatchError`` naming the port and why, nothing is logged, and a later ``start`` serves."""
    port = held_port.getsockname()[1]
    server = SimServer(model_name="m", time_scale=0.01, port=port)
    refused = pytest.raises(DispatchError, match=rf"127\.0\.0\.1:{port}\b.*in use")
    with caplog.at_level(logging.WARNING, logger="uvicorn.error"), refused:
        server.start()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    held_port.close()
    server.start()
    try:
        assert _http.get(f"{server.url}/health").text == "ok"
    finally:
        server.stop()


def test_stop_before_start_and_twice_does_nothing_and_a_stopped_server_starts_again() -> None:
    """Review R63 (checked, right already): ``stop`` before ``start`` and a second ``stop`` do
    nothing; ``start`` after ``stop`` serves again on the same port, and ``start`` while serving
    is the same server."""
    server = SimServer(model_name="m", time_scale=0.01)
    server.stop()
    assert server.start() is server.start()
    assert _http.get(f"{server.url}/health").text == "ok"
    server.stop()
    server.stop()
    with pytest.raises(httpx.ConnectError):
        _http.get(f"{server.url}/health")
    with server:
        assert _http.get(f"{server.url}/health").text == "ok"


@pytest.mark.parametrize("port", [70_000, 65_536, -1, True, 1.5, "8000"])
def test_a_port_that_is_no_tcp_port_is_refused_when_the_server_is_made(port: object) -> None:
    """Review R63: ``SimServer(port=70000)`` and ``port="8000"`` were taken and started (70000
    is no TCP port), ``True`` and ``-1`` were a bare ``RuntimeError`` at ``start``; a port that
    is not an integer from 0 to 65535 is an ``InputError`` naming it when the server is made."""
    with pytest.raises(InputError, match=rf"port must be an integer from 0 to 65535.*{port!r}"):
        SimServer(port=port)  # type: ignore[arg-type]
