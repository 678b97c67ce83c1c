"""The gateway's streamed answers over real HTTP: HTTP/1.0 callers, and what a backend
sends in its events besides the content.

A real ``GatewayServer`` on a real SQLite store on 127.0.0.1, in front of a scripted backend (a
plain ``http.server`` that writes the server-sent events a test sets, as vLLM and SGLang write
them); the callers are raw sockets, to speak HTTP/1.0 as old clients and plain probes do.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import pytest
from test_gateway import MODEL, NAMES, _policy_text
from test_gateway_sloppy_clients import Env as _Env
from test_gateway_sloppy_clients import _Backend as _JSONBackend
from test_gateway_sloppy_clients import serve

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer
from agentgate.dispatch.prefix import estimate_tokens, prompt_text
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
LOGPROBS = {"content": [{"token": "hi", "logprob": -0.25, "bytes": [104, 105], "top_logprobs": []}]}
REASONING = [
    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
    {
        "index": 0,
        "delta": {"reasoning_content": "The user greets; "},
        "logprobs": None,
        "finish_reason": None,
    },
    {"index": 0, "delta": {"reasoning_content": "greet back."}, "logprobs": None, "finish_reason": None},
]
"""A reasoning model's first events (vLLM's ``--reasoning-parser``): the thinking, no content yet."""
ANSWER = [
    {"index": 0, "delta": {"content": "hi"}, "logprobs": LOGPROBS, "finish_reason": None},
    {"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "stop", "stop_reason": None},
]


def _event(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
    body = {
        "id": "chatcmpl-backend",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "system_fingerprint": "fp-engine",
        "choices": choices,
        "usage": usage,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _whole_stream() -> bytes:
    return (
        b"".join(_event([choice]) for choice in REASONING + ANSWER) + _event([], USAGE) + b"data: [DONE]\n\n"
    )


class _Backend(_JSONBackend):
    """An OpenAI-compatible backend on 127.0.0.1 that answers every chat call with the bytes of
    ``stream``, delimited by closing its connection."""

    def __init__(self) -> None:
        self.stream = _whole_stream()
        super().__init__()

    def answer(self, handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("connection", "close")
        handler.end_headers()
        handler.wfile.write(self.stream)
        handler.close_connection = True


class Env(_Env):
    def answer_to(self, request: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """Send ``request`` and read until the gateway closes the connection: the status line, the
        headers (names lowercased) and the body as received (any framing left in)."""
        head, _, body = self.exchange(request).partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (h.partition(b":") for h in lines)
        }
        return status, headers, body


@pytest.fixture(scope="module")
def backend() -> Iterator[_Backend]:
    made = _Backend()
    yield made
    made.stop()


@pytest.fixture
def env(tmp_path: Path, backend: _Backend) -> Iterator[Env]:
    backend.stream = _whole_stream()
    yield from serve(tmp_path, backend, "engine", Env)


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, **extra}


def _events(body: bytes) -> list[dict[str, Any] | str]:
    """The data of each server-sent event in an unframed ``body``: decoded JSON, or ``[DONE]``."""
    data = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


# --- HTTP/1.0 callers ---------------------------------------------------------------------------


def test_an_http_1_0_caller_gets_its_stream_delimited_by_the_close_not_chunked(env: Env) -> None:
    """A streamed answer to an HTTP/1.0 request went out ``Transfer-Encoding: chunked``, which
    HTTP/1.0 does not know (RFC 9112, 6.1: never sent to an HTTP/1.0 recipient): the client read
    the chunk sizes as part of the events. It is now sent unframed and ends with the connection."""
    status, headers, body = env.answer_to(env.request(_body(stream=True), version="1.0"))
    assert status.split()[1] == b"200", (status, body)
    assert b"transfer-encoding" not in headers and b"content-length" not in headers, headers
    assert headers[b"connection"] == b"close"
    assert body.startswith(b"data: "), body[:80]  # no chunk size line before the first event
    events = _events(body)
    assert events[-1] == "[DONE]" and body.endswith(b"data: [DONE]\n\n"), body[-80:]
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "hi"
    assert env.spent() == 5 + 3


def test_an_http_1_0_caller_still_gets_a_refusal_with_its_length(env: Env) -> None:
    # Signed for one body, sent with another: refused before anything is decided.
    head, _, _ = env.request(_body(stream=True), version="1.0").partition(b"Content-Length: ")
    sent = json.dumps(_body(stream=True, max_tokens=9)).encode()
    status, headers, body = env.answer_to(head + b"Content-Length: %d\r\n\r\n%s" % (len(sent), sent))
    assert status.split()[1] == b"401" and int(headers[b"content-length"]) == len(body), (headers, body)
    assert b"transfer-encoding" not in headers
    assert json.loads(body)["error"]["code"] == "args_digest_mismatch"


def test_an_http_1_1_caller_still_gets_its_stream_chunked_on_a_kept_alive_connection(env: Env) -> None:
    status, headers, body = env.answer_to(env.request(_body(stream=True)))
    assert status.split()[1] == b"200" and headers[b"transfer-encoding"] == b"chunked", headers
    assert body.endswith(b"\r\n0\r\n\r\n")  # the last chunk


# --- what a backend sends beside the content ------------------------------------------------------


def test_a_streamed_answer_passes_on_what_the_backend_sent_beside_the_content(env: Env) -> None:
    """A JSON answer is the backend's bytes whole; a streamed one was rebuilt from its content,
    finish reason and tool calls only: a reasoning model's ``reasoning_content`` (the first
    events, with no content, were dropped whole), ``logprobs`` the caller asked for, the engine's
    ``system_fingerprint`` never reached the caller. The usage the gateway asks for on its own
    account is still kept from a caller that did not ask for it."""
    _, _, body = env.answer_to(env.request(_body(stream=True, logprobs=True), version="1.0"))
    events = [e for e in _events(body) if isinstance(e, dict)]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "The user greets; greet back."
    assert [e["choices"][0]["logprobs"] for e in events if e["choices"][0]["logprobs"]] == [LOGPROBS]
    assert {e.get("system_fingerprint") for e in events} == {"fp-engine"}
    assert all(e.get("usage") is None for e in events) and all(e["choices"] for e in events)
    assert env.spent() == 5 + 3


def test_a_caller_that_asked_for_usage_gets_the_backends_usage_event(env: Env) -> None:
    options = {"stream_options": {"include_usage": True}}
    _, _, body = env.answer_to(env.request(_body(stream=True, **options), version="1.0"))
    events = _events(body)
    assert events[-2] == json.loads(_event([], USAGE)[6:]) and events[-1] == "[DONE]"
    assert sum(1 for e in events if isinstance(e, dict) and e.get("usage")) == 1


def test_a_stream_cut_after_the_models_reasoning_is_charged_as_reserved(env: Env) -> None:
    """A reasoning model thinks (``reasoning_content``) before it answers; a stream cut then (the
    engine died, or the caller hung up during a long think) was settled as one that delivered
    nothing and released: the tokens it generated, and sent, went free."""
    env.backend.stream = b"".join(_event([choice]) for choice in REASONING)  # then the engine is gone
    body = _body(stream=True)
    status, _, answer = env.answer_to(env.request(body, version="1.0"))
    assert status.split()[1] == b"200"
    assert _events(answer)[-1]["error"]["code"] == "backend_failed"  # type: ignore[index]
    assert env.spent() == estimate_tokens(prompt_text(body["messages"])) + body["max_tokens"]


# --- the server's address -------------------------------------------------------------------------


def test_the_base_url_of_a_gateway_on_an_ipv6_address_is_a_url(tmp_path: Path, backend: _Backend) -> None:
    """``GatewayServer.url`` (which ``agentgate serve`` prints as where it serves) was
    ``http://::1:8000/v1`` for ``--host ::1``: no client can use it (httpx: "Invalid port")."""
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "engine", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), host="::1", port=0).start()
    try:
        assert server.url == f"http://[::1]:{server.port}/v1"
        answer = _http.get(f"{server.url}/models", timeout=10)
        assert answer.status_code == 200 and answer.json()["data"][0]["id"] == MODEL
    finally:
        server.stop()
        gate.close()
