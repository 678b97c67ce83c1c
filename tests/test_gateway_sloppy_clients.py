"""The gateway against sloppy clients and a backend that refuses, over real HTTP.

A real ``GatewayServer`` on a real SQLite store on 127.0.0.1, in front of a scripted backend (a
plain ``http.server`` answering whatever status and body a test sets); the callers are raw
sockets, to send what ordinary clients send but httpx does not (``curl --http2``'s
``Upgrade: h2c`` on a request with a body, ``CONNECT``).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from test_gateway import MODEL, NAMES, _policy_text

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

BACKEND_NAME = "gpu-node-17"
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3},
}


class _Backend:
    """An OpenAI-compatible backend on 127.0.0.1 answering every chat call ``status`` and ``body``
    (``answer``: a subclass answers otherwise)."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = json.dumps(ANSWER).encode()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(200, b"ok")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                backend.answer(self)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def answer(self, handler: Any) -> None:
        """Answer the chat call ``handler`` (the request's handler) has read."""
        handler._answer(self.status, self.body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    agent: AgentIdentity
    backend: _Backend

    def request(
        self, body: dict[str, Any], *, extra: bytes = b"", close: bool = True, version: str = "1.1"
    ) -> bytes:
        """A signed ``POST /v1/chat/completions`` for ``body`` in HTTP/``version``, as bytes, with
        the ``extra`` header lines (``close``: an HTTP/1.1 request asks to close the connection)."""
        content = json.dumps(body).encode()
        head = f"POST /v1/chat/completions HTTP/{version}\r\nHost: gateway\r\n".encode()
        head += b"Content-Type: application/json\r\n"
        for name, value in invocation_headers(self.agent.key, self.agent.chain, body).items():
            head += f"{name}: {value}\r\n".encode()
        head += b"Connection: close\r\n" if close and version == "1.1" else b""
        return head + b"Content-Length: %d\r\n" % len(content) + extra + b"\r\n" + content

    def exchange(self, *pieces: bytes) -> bytes:
        """Write ``pieces`` on one connection (a pause between them), then read until it closes."""
        with socket.create_connection(("127.0.0.1", self.server.port)) as sock:
            sock.settimeout(10)
            for i, piece in enumerate(pieces):
                if i:
                    time.sleep(0.2)  # a separate read on the server's side
                sock.sendall(piece)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        return received

    def entries(self) -> list[tuple[str, str | None, int]]:
        """(kind, status, budget delta) of each call's audit entry."""
        self.gate.flush()
        return [
            (e.kind, e.status, e.budget_delta)
            for e in self.gate.audit.entries()
            if not (e.resource or "").startswith("agent:")
        ]

    def spent(self) -> int:
        self.gate.flush()
        return self.gate.budget_usage(self.agent)[self.agent.chain.root.id][0]


EnvT = TypeVar("EnvT", bound=Env)


@pytest.fixture(scope="module")
def backend() -> Iterator[_Backend]:
    made = _Backend()
    yield made
    made.stop()


@pytest.fixture
def env(tmp_path: Path, backend: _Backend) -> Iterator[Env]:
    backend.status, backend.body = 200, json.dumps(ANSWER).encode()
    yield from serve(tmp_path, backend, BACKEND_NAME, Env)


def serve(tmp_path: Path, backend: _Backend, name: str, kind: type[EnvT]) -> Iterator[EnvT]:
    """A gateway on 127.0.0.1 in front of ``backend`` (named ``name`` in its inventory), on a
    SQLite store in ``tmp_path``, and an agent of role ``chat``: the ``kind`` of ``Env`` they make."""
    keys = {who: SigningKey.generate() for who in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": name, "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield kind(gate, server, agent, backend)
    finally:
        server.stop()
        gate.close()


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, **extra}


def _answers(received: bytes) -> list[tuple[int, bytes]]:
    """The status and body of each answer (bodies framed by Content-Length) in ``received``."""
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(v)
            for k, _, v in (line.partition(b":") for line in lines[1:])
            if k.lower() == b"content-length"
        )
        answers.append((int(lines[0].split()[1]), rest[:length]))
        received = rest[length:]
    return answers


H2C = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
WEBSOCKET = b"Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"


@pytest.mark.parametrize("upgrade", [H2C, WEBSOCKET], ids=["h2c", "websocket"])
@pytest.mark.parametrize("split", [False, True], ids=["one-write", "body-apart"])
def test_a_call_that_asks_to_upgrade_its_connection_is_answered_as_plain_http(
    env: Env, upgrade: bytes, split: bool
) -> None:
    """``curl --http2`` on plain http sends ``Upgrade: h2c`` with its POST. httptools reads no body
    after a head that asks for an upgrade, so the app got an empty body: a correctly signed call
    was refused 400 "the body is not JSON" and audited as a deny. The upgrade is ignored now (HTTP
    lets a server do that): the call is decided, answered, charged and audited as any other."""
    request = env.request(_body(), extra=upgrade)
    head, _, content = request.partition(b"\r\n\r\n")
    pieces = (head + b"\r\n\r\n", content) if split else (request,)
    ((status, answer),) = _answers(env.exchange(*pieces))
    assert status == 200, answer
    assert json.loads(answer)["choices"][0]["message"]["content"] == "hi"
    assert env.entries() == [("allow", None, 12), ("outcome", "ok", 8)]


def test_a_call_after_an_ignored_upgrade_on_the_same_connection_is_answered_too(env: Env) -> None:
    """The connection stays plain HTTP/1.1: the next request on it (here written at once,
    pipelined) is read and answered in order."""
    first = env.request(_body(), extra=H2C, close=False)
    second = env.request(_body(max_tokens=9))
    answers = _answers(env.exchange(first + second))
    assert [status for status, _ in answers] == [200, 200], answers
    assert [kind for kind, _, _ in env.entries()] == ["allow", "outcome", "allow", "outcome"]


def test_connect_is_a_bare_400_with_nothing_decided(env: Env) -> None:
    received = env.exchange(b"CONNECT backend.internal:443 HTTP/1.1\r\nHost: backend.internal:443\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 "), received
    assert env.entries() == []


def test_a_request_the_backend_refuses_is_400_with_its_words_but_not_its_name(env: Env) -> None:
    """The 400 ``rejected_by_backend`` passed on "gpu-node-17 rejected the request: HTTP 400: ...":
    the backend's inventory name went to remote callers, which the 502 and 503 answers never tell
    (what the dispatcher knows is the log's). The backend's own words still reach the caller."""
    env.backend.status = 400
    env.backend.body = b'{"error": {"message": "maximum context length is 8 tokens"}}'
    ((status, answer),) = _answers(env.exchange(env.request(_body())))
    error = json.loads(answer)["error"]
    assert status == 400 and error["code"] == "rejected_by_backend", answer
    assert "maximum context length is 8 tokens" in error["message"]
    assert BACKEND_NAME not in error["message"]
    assert env.spent() == 0
    assert env.entries() == [("allow", None, 12), ("outcome", "error", 0)]


@pytest.mark.parametrize("status", [401, 403])
def test_a_backend_rejecting_the_gateways_key_is_a_backend_failure_not_rejected_by_backend(
    env: Env, status: int
) -> None:
    """docs/gateway.md listed a backend's 401/403 under 400 ``rejected_by_backend``; it is the
    gateway's own key that was refused (``BackendRejectedCredentials``): 502 or 503, a fixed
    message, nothing charged."""
    env.backend.status = status
    env.backend.body = b'{"error": "bad key"}'
    ((answer_status, answer),) = _answers(env.exchange(env.request(_body())))
    error = json.loads(answer)["error"]
    assert (answer_status, error["code"]) in ((502, "backend_failed"), (503, "no_backend")), answer
    assert env.spent() == 0


def test_a_backend_that_fails_every_call_is_a_503_or_502_never_a_429_shed(env: Env) -> None:
    """docs/gateway.md said a retry shed after a failed attempt is 429 ``shed``; the dispatcher
    raises ``NoBackend`` there (the failures are the cause, not load): 503 ``no_backend``."""
    env.backend.body = b"<html>not a chat completion</html>"
    ((status, answer),) = _answers(env.exchange(env.request(_body())))
    error = json.loads(answer)["error"]
    assert (status, error["code"]) in ((502, "backend_failed"), (503, "no_backend")), answer
    assert BACKEND_NAME not in answer.decode()
    assert env.spent() == 0
