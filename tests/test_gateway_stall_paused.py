"""(Review R48, mutant g10 of the gateway's HTTP layer) a caller that pauses with the rest of its
answer already handed to the kernel is left to the kernel, not reset.

``BoundedHttpToolsProtocol`` starts its stall clock when an answer ends with its tail still in the
gateway's own write buffer (the caller not reading, the socket's buffers full). When the clock
runs out and that buffer is empty (the caller took enough for the kernel to hold the rest), the
answer is the kernel's to deliver: the connection is not cut, however long the caller then pauses
(``_check_stall``'s early return). The existing stall tests only cover callers that never read.

Real loopback HTTP: the ``env`` fixture of ``test_gateway_stall`` (a GatewayServer with
``stream_stall_s`` 0.5 s on SQLite, in front of a simulated vLLM backend) and a raw-socket client.
So that "the rest fits in the kernel" is a known size rather than whatever the kernel's send-buffer
autotuning (MiBs on loopback) makes of it, the gateway's end of the connection gets a fixed
``SO_SNDBUF`` before the request is sent, and the client a small ``SO_RCVBUF``.

Found and fixed by the lead (was a strict xfail): on asyncio's own event loop (uvicorn's
fallback without uvloop), an answer that ended with writing paused, whose caller then read
below the low-water mark and stopped, held its connection for ever: ``resume_writing`` stopped
the stall clock and nothing started it again (``_http.py`` now restarts it there when every
answer is written and bytes still wait).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import test_gateway_stall
import uvicorn
from test_gateway_stall import MODEL, STALL_S, Env, _assert_reset, _request

from agentgate.dispatch.gateway._http import BoundedHttpToolsProtocol

# Its ``env`` fixture, for this module only: a ``pytest_plugins`` entry would replace
# test_gateway's ``env`` in every module of the session.
env = test_gateway_stall.env


SNDBUF = 16 << 10
"""The gateway's send buffer on the connection (the kernel doubles it; autotuning off)."""
HIGH_WATER = 64 << 10
"""asyncio's default high-water mark of a transport's write buffer (uvicorn keeps it)."""


def _protocol(env: Env) -> Any:
    """The gateway's protocol object of the one connection open to it."""
    deadline = time.monotonic() + 10
    while not env.server.server.server_state.connections:
        assert time.monotonic() < deadline, "the gateway never saw the connection"
        time.sleep(0.005)
    (protocol,) = env.server.server.server_state.connections
    return protocol


def test_a_caller_that_pauses_with_the_rest_of_its_stream_in_the_kernel_is_not_reset(env: Env) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 330,
        "stream": True,
    }
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    try:
        sock.settimeout(10)
        sock.connect(("127.0.0.1", env.server.port))
        protocol = _protocol(env)
        transport = protocol.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        sock.sendall(_request(env, body))
        # The caller reads nothing until the answer has ended: the socket buffers fill, and the
        # answer's tail waits in the gateway's own buffer (below the high-water mark: writing
        # never paused), so the stall clock starts at the answer's end.
        deadline = time.monotonic() + 20
        while protocol.cycle is None or not protocol.cycle.response_complete:
            assert time.monotonic() < deadline, "the stream did not end"
            time.sleep(0.002)
        tail = transport.get_write_buffer_size()
        assert 0 < tail <= HIGH_WATER and not protocol.flow.write_paused, tail
        # The caller reads a part (here about 60 % of the answer, in some 20 ms: well within the
        # stall limit, whose end finds the gateway's buffer empty), enough for the kernel to take
        # the gateway's tail ...
        received = b""
        while transport.get_write_buffer_size() > 0:
            received += sock.recv(2048)
            time.sleep(0.001)
        assert not received.endswith(b"\r\n0\r\n\r\n"), "the caller read it all: nothing left to the kernel"
        # ... and pauses for three stall limits, the rest with the kernel. The gateway must leave
        # it there: the mutant resets the connection (the caller takes nothing for a stall limit).
        time.sleep(3 * STALL_S)
        while not received.endswith(b"\r\n0\r\n\r\n"):
            piece = sock.recv(1 << 16)
            assert piece, "the connection was closed before the answer's end"
            received += piece
    finally:
        sock.close()
    assert b"data: [DONE]" in received
    env.gate.flush()
    (outcome,) = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
    assert outcome.status == "ok", outcome.reasons


class _EndsPaused:
    """uvicorn with the gateway's protocol (stall limit ``STALL_S``) on asyncio's own event loop
    (what uvicorn falls back to without uvloop), serving a stream whose last write pushes the
    transport's buffer past its high-water mark: the answer ends with writing paused."""

    def __init__(self, loop: str = "asyncio") -> None:
        config = uvicorn.Config(
            self._app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            interface="asgi3",
            loop=loop,
            http=BoundedHttpToolsProtocol.with_stall(STALL_S),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        await self._ends_paused(send)

    async def _ends_paused(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        (connection,) = self.server.server_state.connections
        while connection.transport.get_write_buffer_size() <= HIGH_WATER - (4 << 10):
            await send({"type": "http.response.body", "body": b"x" * 1024, "more_body": True})
        await send({"type": "http.response.body", "body": b"y" * (8 << 10), "more_body": False})

    def __enter__(self) -> Any:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@contextlib.contextmanager
def connected(served: _EndsPaused) -> Iterator[tuple[socket.socket, Any, Any]]:
    """A raw-socket caller of ``served`` with a small receive buffer, and the gateway's protocol
    and transport of its connection, whose send buffer is made ``SNDBUF`` before any request."""
    server = served.server
    port = server.servers[0].sockets[0].getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        deadline = time.monotonic() + 10
        while not server.server_state.connections:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        (protocol,) = server.server_state.connections
        transport = protocol.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        yield sock, protocol, transport


def answered(protocol: Any) -> None:
    """Wait until the connection's answer has ended."""
    deadline = time.monotonic() + 10
    while protocol.cycle is None or not protocol.cycle.response_complete:
        assert time.monotonic() < deadline, "the answer did not end"
        time.sleep(0.002)


def _ends_paused_then_stops_reading() -> bool:
    """One scene of the test below; False when it could not be set up (the kernel took the whole
    tail at once, so the gateway's buffer never stood between 0 and the low-water mark: a loaded
    machine's scheduling), True when it ran and held."""
    with _EndsPaused() as served, connected(served) as (sock, protocol, transport):
        server = served.server
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answered(protocol)
        assert protocol.flow.write_paused  # the answer ended with writing paused
        while not 0 < transport.get_write_buffer_size() <= HIGH_WATER // 4:
            if transport.get_write_buffer_size() == 0:
                return False  # the window was missed: nothing is left to stall on
            assert sock.recv(256), "the connection closed while the caller read"
        # The caller stops reading here, with bytes left in the gateway's buffer.
        deadline = time.monotonic() + 4 * STALL_S
        while server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.server_state.connections, "a caller that stopped reading holds its connection"
        _assert_reset(sock)
        return True


def test_an_answer_that_ended_paused_and_whose_caller_stops_reading_below_low_water_is_cut() -> None:
    # The answer's last write paused writing (the stall clock runs); the caller reads until the
    # transport's buffer falls below its low-water mark (asyncio resumes writing there, with
    # bytes left) and stops. resume_writing stopped the clock; on_response_complete, long past,
    # started none (one was running): the tail waited with no clock, the connection (and its
    # close after the keep-alive timeout) held for ever. Up to three scenes: one must be set up.
    assert any(_ends_paused_then_stops_reading() for _ in range(3)), "the scene was never set up"
