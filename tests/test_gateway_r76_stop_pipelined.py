"""Review R76: a gateway that stops while a call runs with another pipelined behind it answers the
running call and closes the connection; it never decides the queued one.

uvicorn's ``shutdown`` of a connection marks only its newest request (``cycle``) not to be kept
alive, and with requests pipelined that is a queued one: the answer running went on with the
connection kept alive, and when it ended within the shutdown grace uvicorn started the next
request of a server that was stopping. That call was decided, allowed, sent to a backend and
audited (its answer was then cut by the loop's end). Found under load, where the last of the
grace left time for the queued call to be decided (a run of
tests/test_dispatch_line_and_pool.py on four workers over two cores: three allows for one
answer); here the running answer ends well inside the grace, so the queued one always had time.

Over real HTTP on 127.0.0.1 (``GatewayServer`` in front of ``SimServer``), with a raw socket for
the pipelined requests.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from test_gateway_shutdown_pipelining import MODEL, STREAM, Env, _env, _held_reservations, _read_head

SMALL = {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 5}
RUNNING = {
    "stream": {**STREAM, "max_tokens": 60},
    "json": {**SMALL, "max_tokens": 60},
}


def _stopping(env: Env, within: float) -> None:
    """Wait until the server refuses connections: uvicorn closes its listener in the same step,
    with no wait between, as it asks every connection to shut down."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", env.server.port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"the gateway still accepted connections {within} s after it was told to stop")


def _first_answer_then_close(sock: socket.socket, end: bytes) -> tuple[bytes, bytes]:
    """The first answer, read up to its ``end``, and what follows it until the connection closes."""
    seen = b""
    while end not in seen:
        piece = sock.recv(65536)
        assert piece, seen[-300:]
        seen += piece
    first, _, rest = seen.partition(end)
    while piece := sock.recv(65536):
        rest += piece
    return first + end, rest


@pytest.mark.parametrize("kind", sorted(RUNNING))
def test_a_call_that_ends_within_the_grace_closes_the_connection_and_the_queued_one_is_never_decided(
    tmp_path: Path, kind: str
) -> None:
    with _env(tmp_path, time_scale=10.0, grace_s=30) as env:  # the running call: about 3 s
        sock = env.connect()
        sock.settimeout(30)
        try:
            sock.sendall(env.request(RUNNING[kind]) + env.request(SMALL) + env.request(SMALL))
            if kind == "stream":
                assert _read_head(sock).startswith(b"HTTP/1.1 200")
            stopper = threading.Thread(target=env.server.stop)
            stopper.start()
            _stopping(env, within=10)
            # The running call has not settled yet (else the queued calls were rightly decided
            # before the stop, and this test would prove nothing).
            assert not env.outcomes(), "the running call ended before the gateway began to stop"
            end = b"data: [DONE]\n\n" if kind == "stream" else b'"total_tokens"'
            answer, after = _first_answer_then_close(sock, end)
            stopper.join(40)
        finally:
            sock.close()
        assert not stopper.is_alive()
        assert b"shutting_down" not in answer and b"HTTP/1.1 " not in after, after[:300]
        env.gate.flush()
        model = f"model:{MODEL}"
        decided = [(e.kind, e.resource) for e in env.gate.audit.entries()]  # the grant's issue first
        assert decided == [("allow", "agent:agent"), ("allow", model), ("outcome", model)], decided
        assert [o.status for o in env.outcomes()] == ["ok"]
        assert not _held_reservations(env)
        assert env.gate.verify().ok
