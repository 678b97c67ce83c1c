"""Review R87 of the gateway's HTTP protocol (agentgate/_bounded_http.py): the queue of pipelined
requests on one connection is bounded.

uvicorn stops reading a connection while a pipelined request is queued behind the one being
answered; the gateway's protocol resumed reading after every request (so that a caller's close
is seen), so a caller that wrote requests and read no answer had every one of them queued: one
connection took the gateway from 92 MB to 755 MB in 6 s. Reading now stops once
``max_queued`` requests are queued, and resumes as they are answered.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from test_gateway_stall import MODEL, POLICY

from agentgate._bounded_http import BoundedHttpToolsProtocol
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
ANSWER = json.dumps(
    {
        "id": "held",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
).encode()
"""The held chat call's answer, once released."""
PIPELINED = 64
"""Requests written, each on its own, behind a call that the backend holds."""


class _HoldingBackend:
    """A backend that answers its health probe at once and a chat call once ``release`` is called."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.holding = threading.Event()
        self._released = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while head := conn.recv(65536):
                if head.startswith(b"GET "):
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                self.holding.set()
                self._released.wait(10)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(ANSWER), ANSWER)
                )

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self.release()
        self.listener.close()


@contextlib.contextmanager
def _held_call(tmp_path: Path) -> Iterator[tuple[GatewayServer, socket.socket, _HoldingBackend]]:
    """A gateway, and a connection to it whose first request, a chat call, is held by the backend."""
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    backend = _HoldingBackend()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "holding", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        agent = gate.issue(root, name="agent", key=agent_key, role="chat")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 4}
        raw = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in invocation_headers(agent.key, agent.chain, body).items())
        call = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(raw)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(call.encode() + raw)
            assert backend.holding.wait(10), "the call never reached the backend"
            yield server, sock, backend
    finally:
        backend.close()
        server.stop()
        gate.close()


def _protocol(server: GatewayServer) -> BoundedHttpToolsProtocol:
    (protocol,) = server.server.server_state.connections
    assert isinstance(protocol, BoundedHttpToolsProtocol)
    return protocol


def _queued_after(protocol: BoundedHttpToolsProtocol, count: int, within_s: float = 0.15) -> bool:
    """Whether the connection's queue reaches ``count`` requests within ``within_s``."""
    deadline = time.monotonic() + within_s
    while len(protocol.pipeline) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def test_requests_pipelined_behind_a_held_call_stop_being_read_at_the_bound(tmp_path: Path) -> None:
    with _held_call(tmp_path) as (server, sock, backend):
        protocol = _protocol(server)
        # One request at a time, each sent once the one before it is queued (a read of its own),
        # until the gateway stops reading; then all the rest at once.
        sent = 0
        while sent < PIPELINED:
            sock.sendall(HEALTH)
            sent += 1
            if not _queued_after(protocol, sent):
                break
        sock.sendall(HEALTH * (PIPELINED - sent))
        queued = len(protocol.pipeline)
        assert queued < PIPELINED, "every request was read and queued"
        assert not _queued_after(protocol, queued + 1)  # nor is any read later
        assert queued == protocol.max_queued
        assert protocol.flow.read_paused
        # Nothing is lost: once the held call is answered, so is every request queued or unread.
        backend.release()
        seen = b""
        while seen.count(b"HTTP/1.1 200 OK") < 1 + PIPELINED:
            piece = sock.recv(65536)
            assert piece, f"the gateway closed after {seen.count(b'HTTP/1.1 200 OK')} answers"
            seen += piece
        first = seen.split(b"\r\n\r\n")[1]
        assert json.loads(first[: first.index(b"HTTP/")])["id"] == "held"  # the call was answered first
