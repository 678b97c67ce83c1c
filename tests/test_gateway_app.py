"""The gateway's ASGI app (agentgate/dispatch/gateway/_app.py) between a chat request and its
backend: a body over ``MAX_BODY_BYTES`` is refused however it arrives (and before it is sent, when
its caller waits for ``100 Continue``), the prompt reserved counts
the tool definitions, an answer without a completion count is charged its whole reservation, the
body's ``priority`` class is never forwarded, and a call the shutdown cuts before it reaches a
backend (its body still arriving, or its decision under way) is answered 503 and settled.

Real loopback HTTP: the gateway tests' ``env`` fixture (GatewayServer, simulated vLLM backends,
SQLite), and hand-written hostile backends (``test_gateway_hostile_backends.Hostile``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import socket
import sqlite3
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from test_gateway import Env, _body, _post
from test_gateway_end_to_end import _body as _r16_body
from test_gateway_hostile_backends import _OK_JSON, Hostile, _head, _json, _settled
from test_gateway_hostile_backends import RESERVED as R16_RESERVED
from test_gateway_hostile_backends import _gateway as _r16_gateway
from test_gateway_shutdown_pipelining import MODEL as SHUTDOWN_MODEL
from test_gateway_shutdown_pipelining import _env as _shutdown_env
from test_gateway_shutdown_pipelining import _held_reservations, _stop_in_background

from agentgate.dispatch.gateway import invocation_headers
from agentgate.dispatch.gateway._request import MAX_BODY_BYTES
from agentgate.dispatch.prefix import (
    AUDIO_TOKENS_PER_SECOND,
    FILE_TOKENS,
    IMAGE_TOKENS,
    estimate_tokens,
    prompt_text,
)

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def test_a_body_over_the_limit_is_refused_however_it_is_split(env: Env) -> None:
    """Kills: the body's size counted per part (``size = len(part)``) or not checked at all.
    Review R54: an oversized body was answered 400 invalid_request, not 413 Content Too Large.

    Rule: a request body over ``MAX_BODY_BYTES`` (8 MiB) is refused 413 naming the limit, and the
    refusal is audited with nothing reserved, whatever the size of the parts it arrives in (the
    ASGI server hands it over in parts far smaller than the limit); even when it is valid JSON."""
    filler = "a" * (MAX_BODY_BYTES + 1024)
    raw = json.dumps({**_body(), "messages": [{"role": "user", "content": filler}]}).encode()
    before_entries = len(env.entries())
    before = env.ledger()
    answer = _post(env, raw, {"Authorization": f"Bearer {env.agent.chain.token}"})
    assert answer.status_code == 413, (answer.status_code, answer.text[:300])
    error = answer.json()["error"]
    assert f"over {MAX_BODY_BYTES} bytes" in error["message"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
    entries = env.entries()
    assert len(entries) == before_entries + 1 and entries[-1].kind != "allow"
    assert env.ledger() == before


class _NoCompletionCount(Hostile):
    """The hostile backend of review R16, with one more mode: ``json_no_completion``, a JSON
    answer whose ``usage`` has ``prompt_tokens`` and no ``completion_tokens``."""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode != "json_no_completion" or stream:
            return await super()._answer(w, r, stream)
        body = json.loads(_OK_JSON)
        body["usage"] = {"prompt_tokens": 5}
        w.write(_json(json.dumps(body).encode()))
        return True


def _charged(tmp_path: Path, body: dict[str, Any]) -> tuple[httpx.Response, int]:
    """``body`` posted through the R16 gateway to a backend that answers JSON with no completion
    count (so the call is charged its whole reservation): the answer, and what was charged (its
    one ``ok`` outcome settled)."""
    backend = _NoCompletionCount()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            backend.mode = "json_no_completion"
            spent = env.spent()
            answer = env.post(body)
            assert answer.status_code == 200, answer.text
            (outcome,) = _settled(env, 1)
            assert outcome.status == "ok"
            return answer, env.spent() - spent
    finally:
        backend.close()


def test_a_json_answer_without_a_completion_count_is_charged_its_reservation(tmp_path: Path) -> None:
    """Kills: ``_spent`` charging a JSON answer's usage when it has no ``completion_tokens`` (the
    ``completion_tokens is None`` test dropped: the output went out charged as 0 tokens).

    Rule (docs/gateway.md, "What is charged"): a JSON answer whose ``usage`` has no
    ``completion_tokens`` is passed on and charged its whole reservation (prompt estimate plus
    ``max_tokens``), never less than may have been used."""
    answer, charged = _charged(tmp_path, _r16_body())
    assert answer.json()["choices"][0]["message"]["content"] == "hi"
    assert charged == R16_RESERVED


_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, as a short sentence. " * 8,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.mark.parametrize("field", ["tools", "functions"])
def test_a_calls_tool_definitions_are_reserved_as_prompt(tmp_path: Path, field: str) -> None:
    """Kills: ``_prompt_estimate`` leaving out the body's ``tools`` (or legacy ``functions``).

    Rule: a chat template renders the tool definitions into the prompt, so the prompt reserved
    (and charged, when the answer reports no completion count) counts them at four characters a
    token, as the messages; a call with 600 characters of tool definitions holds more than the
    same call without them."""
    definitions = [_TOOL if field == "tools" else _TOOL["function"]]
    body = _r16_body(**{field: definitions})
    tools_text = json.dumps(definitions, separators=(",", ":"), ensure_ascii=False)
    reserved = estimate_tokens(prompt_text(body["messages"])) + estimate_tokens(tools_text) + 8
    assert reserved > R16_RESERVED + 100
    assert _charged(tmp_path, body)[1] == reserved


def test_an_image_is_reserved_at_its_fixed_estimate_never_by_its_data_urls_length(tmp_path: Path) -> None:
    """Kills: ``_prompt_estimate`` counting an image content part by the characters of its base64
    data URL: a photo of 1.5 MB reserved some 400,000 prompt tokens, so a budget that pays for the
    call many times over refused it (and a quota in tokens was held for all of them meanwhile).

    Rule: each ``image_url`` content part is reserved at ``IMAGE_TOKENS``, whatever its size; the
    text beside it at four characters a token, as any message's."""
    photo = "data:image/png;base64," + "iVBORw0KGgo" * 150_000  # 1.65 MB of base64
    parts = [
        {"type": "text", "text": "What is in this photo?"},
        {"type": "image_url", "image_url": {"url": photo}},
    ]
    body = _r16_body(messages=[{"role": "user", "content": parts}])
    text_only = [{"role": "user", "content": parts[:1]}]
    reserved = estimate_tokens(prompt_text(text_only)) + IMAGE_TOKENS + 8
    assert _charged(tmp_path, body)[1] == reserved


def _silence_wav(seconds: int) -> bytes:
    """``seconds`` of 16 kHz 16-bit mono PCM silence, as a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(16_000)
        writer.writeframes(b"\0" * 32_000 * seconds)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["input_audio", "file"])
def test_audio_and_files_are_reserved_by_their_estimate_never_by_their_base64(
    tmp_path: Path, kind: str
) -> None:
    """Kills: ``_prompt_estimate`` counting an ``input_audio`` or ``file`` content part by the
    characters of its base64 data: 30 s of speech (a WAV of 960 KB) reserved some 320,000 prompt
    tokens, and a PDF of 1 MB some 350,000, so a budget that pays for the call many times over
    refused it.

    Rule (docs/gateway.md, "What is charged"): a WAV recording is reserved at its duration times
    ``AUDIO_TOKENS_PER_SECOND`` (30 s: 751 tokens, its header's bytes counted), a ``file`` part at
    ``FILE_TOKENS`` whatever its size; the text beside them at four characters a token."""
    if kind == "input_audio":
        data = base64.b64encode(_silence_wav(30)).decode()
        part: dict[str, Any] = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
        media = 30 * AUDIO_TOKENS_PER_SECOND + 1
    else:
        pdf = base64.b64encode(b"%PDF-1.7\n" + b"x" * 1_000_000).decode()
        part = {
            "type": "file",
            "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
        }
        media = FILE_TOKENS
    parts = [{"type": "text", "text": "What does it say?"}, part]
    body = _r16_body(messages=[{"role": "user", "content": parts}])
    text_only = [{"role": "user", "content": parts[:1]}]
    assert _charged(tmp_path, body)[1] == estimate_tokens(prompt_text(text_only)) + media + 8


class _Recording(Hostile):
    """The hostile backend of review R16 reduced to one that answers every call well (JSON) and
    keeps each chat request's body as the gateway sent it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        super().__init__()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lengths = [
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ]
                body = await reader.readexactly(lengths[0] if lengths else 0)
                if head.split(b" ")[1] == b"/v1/chat/completions":
                    self.bodies.append(json.loads(body))
                    writer.write(_json(_OK_JSON))
                else:
                    writer.write(_json(b"ok", ctype="text/plain"))
                await writer.drain()
        writer.close()


def test_the_priority_class_is_never_forwarded_to_the_backend(tmp_path: Path) -> None:
    """Kills: the body's ``priority`` left in the payload sent to the backend.

    Rule (docs/gateway.md, "Priority classes"): agentgate's ``priority`` (a class name) is the
    gateway's own routing input, never forwarded: vLLM's own ``priority`` is an integer, and a
    class name there is refused (or misread) by the engine. The rest of the body goes on, with
    ``max_tokens`` set to what was reserved."""
    backend = _Recording()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            sent = {**_r16_body(), "priority": "interactive", "max_completion_tokens": 7}
            sent.pop("max_tokens", None)
            answer = env.post(sent)
            assert answer.status_code == 200, answer.text
            (forwarded,) = backend.bodies
            assert "priority" not in forwarded
            assert forwarded["max_tokens"] == 7  # the output limit reserved and signed
            assert forwarded["messages"] == sent["messages"]
    finally:
        backend.close()


# --- calls cut by the shutdown before they reach a backend -------------------------------------


@contextlib.contextmanager
def _uvicorn_errors() -> Iterator[list[str]]:
    """The lines uvicorn logs as errors meanwhile (an exception that escaped the app: a traceback)."""
    lines: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR and "graceful shutdown exceeded" not in record.getMessage():
                lines.append(record.getMessage())

    handler = Handler()
    logger = logging.getLogger("uvicorn.error")
    # At ERROR whatever a simulator's uvicorn set it to (a ``GatewayServer`` leaves it as it is).
    level = logger.level
    logger.setLevel(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _until(condition: Callable[[], bool], what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _answer_of(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionError):
        while piece := sock.recv(65536):
            received += piece
    return received


def test_a_call_whose_body_is_still_arriving_when_the_grace_ends_is_answered_503(tmp_path: Path) -> None:
    """Kills: the shutdown's cancellation of a request still reading its body escaping the app.

    Rule (docs/gateway.md, "Running it"): a call whose body has not all arrived when the shutdown
    grace ends is answered 503 ``shutting_down``, nothing decided, audited or charged; it was an
    exception out of the app (uvicorn's "Exception in ASGI application" and a traceback)."""
    with _shutdown_env(tmp_path, time_scale=0.01, grace_s=1) as env, _uvicorn_errors() as errors:
        request = env.request(_r16_body(model=SHUTDOWN_MODEL))
        sock = socket.create_connection(("127.0.0.1", env.server.port), timeout=30)
        try:
            sock.sendall(request[:-10])  # the head and all of the body but its last 10 bytes
            _until(lambda: env.server.gateway._in_flight == 1, "the call never reached the app")
            stopper = _stop_in_background(env)
            answer = _answer_of(sock)
            stopper.join(30)
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "shutting_down"
        assert errors == []
        env.gate.flush()
        assert [e.kind for e in env.gate.audit.entries() if e.resource.startswith("model:")] == []
        assert not _held_reservations(env)


def test_a_call_being_decided_when_the_grace_ends_is_released_and_its_outcome_audited(
    tmp_path: Path,
) -> None:
    """Kills: the shutdown's cancellation of a call whose decision runs in a worker thread (other
    calls in flight) escaping the app while the thread records the allow: its reservation was
    held until the grant expired, no outcome was ever audited, and uvicorn logged a traceback.

    Rule: the decision, once begun, is waited for; a call it allows is then settled as one the
    shutdown cut before it was sent (released, audited ``error`` ``GatewayStopped``) and answered
    503 ``shutting_down``. The decision is held up here by another connection to the store that
    holds its write lock (as a second process on the same file would)."""
    with _shutdown_env(tmp_path, time_scale=0.01, grace_s=1) as env, _uvicorn_errors() as errors:
        gateway = env.server.gateway
        slow = socket.create_connection(("127.0.0.1", env.server.port), timeout=30)
        sock = socket.create_connection(("127.0.0.1", env.server.port), timeout=30)
        locker = sqlite3.connect(tmp_path / "agentgate.db", isolation_level=None, timeout=30)
        try:
            slow.sendall(env.request(_r16_body(model=SHUTDOWN_MODEL))[:-10])  # in flight meanwhile
            _until(lambda: gateway._in_flight == 1, "the first call never reached the app")
            locker.execute("BEGIN IMMEDIATE")
            sock.sendall(env.request(_r16_body(model=SHUTDOWN_MODEL)))
            _until(lambda: gateway._in_flight == 2, "the second call never reached the app")
            time.sleep(0.3)  # its decision is waiting for the store's write lock
            stopper = _stop_in_background(env)
            time.sleep(2.0)  # the grace (1 s) is over: the calls are cancelled
            locker.execute("COMMIT")
            answer = _answer_of(sock)
            stopper.join(30)
        finally:
            locker.close()
            slow.close()
            sock.close()
        assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "shutting_down"
        assert errors == []
        env.gate.flush()
        kinds = [e.kind for e in env.gate.audit.entries() if e.resource.startswith("model:")]
        assert kinds == ["allow", "outcome"]
        (outcome,) = env.outcomes()
        assert outcome.status == "error" and "GatewayStopped" in outcome.reasons[0], outcome.reasons
        assert not _held_reservations(env)


def test_a_body_declared_over_the_limit_is_refused_before_the_caller_sends_it(env: Env) -> None:
    """Kills: a caller that asks to be told before it sends its body (``Expect: 100-continue``,
    as curl does for a body over 1 MiB) being told to go on (``100 Continue``) whatever size its
    ``Content-Length`` declares: it then sent 8 MiB only to be refused.
    Review R54: a body declared over the limit was answered 400 invalid_request, not 413.

    Rule (docs/gateway.md, "Errors"): a body declared over ``MAX_BODY_BYTES`` by such a caller is
    refused at once, 413 naming the limit, audited, nothing reserved; no ``100 Continue`` is
    sent, and the connection closes (the caller may send the body or not: what follows on the
    connection cannot be read as a next request)."""
    before_entries = len(env.entries())
    before = env.ledger()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {env.agent.chain.token}\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\nExpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = _answer_of(sock)  # the connection closes after the answer
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert f"over {MAX_BODY_BYTES} bytes" in error["message"] and error["code"] == "request_too_large"
    entries = env.entries()
    assert len(entries) == before_entries + 1 and entries[-1].kind == "deny"
    assert env.ledger() == before


def test_a_body_within_the_limit_is_still_asked_for_with_100_continue(env: Env) -> None:
    """The other side of the rule above: a caller that waits for ``100 Continue`` with a body
    within the limit is told to go on, and its call is answered."""
    body = _body()
    raw = json.dumps(body).encode()
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(raw)}\r\n"
            "Expect: 100-continue\r\nConnection: close\r\n\r\n".encode()
        )
        assert sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(raw)
        answer = _answer_of(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


# --- calls no backend takes: a model none serves, backends held down by their Retry-After -----


class _Busy(Hostile):
    """The hostile backend of review R16, with one more mode: ``busy``, every chat call answered
    503 with ``Retry-After: 60`` (an engine that asks to be left alone for a minute)."""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode != "busy":
            return await super()._answer(w, r, stream)
        body = b'{"error": {"message": "overloaded"}}'
        headers = {"content-type": "application/json", "content-length": str(len(body)), "retry-after": "60"}
        w.write(_head("503 Service Unavailable", headers) + body)
        return True


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_model_no_backend_serves_is_404_model_not_found_and_nothing_is_charged(
    tmp_path: Path, stream: bool
) -> None:
    """Kills: a call to a model that the policy declares and no backend serves answered 503
    ``no_backend``, which the OpenAI SDKs retry (and a client loop may retry for ever) though no
    try can ever be served.

    Rule (docs/gateway.md, "Errors"): such a call is allowed, then answered 404
    ``not_found_error`` / ``model_not_found`` naming the model, as OpenAI answers an unknown model;
    its reservation is released and its outcome audited ``error`` (``UnknownModel``)."""
    backend = Hostile()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            answer = env.post(_r16_body(model="qwen3-32b", stream=stream))  # declared, not served
            assert answer.status_code == 404, answer.text
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("not_found_error", "model_not_found")
            assert "'qwen3-32b'" in error["message"]
            (outcome,) = _settled(env, 1)
            assert outcome.status == "error" and outcome.reasons[0].startswith("UnknownModel: ")
            assert env.spent() == 0 and env.held() == []
    finally:
        backend.close()


def test_a_call_every_backend_of_which_is_held_down_by_its_retry_after_gets_that_time(
    tmp_path: Path,
) -> None:
    """Kills: the 503 ``no_backend`` of a call whose every backend asked, by its ``Retry-After``,
    not to be sent calls for a minute carrying no ``Retry-After`` of its own: the OpenAI SDKs
    retry it at once (twice), and a caller learns nothing of when to come back.

    Rule (docs/gateway.md, "Errors"): that 503 carries ``Retry-After`` = the seconds until the
    first of those backends may be used again (rounded up, at least 1), and its message says the
    same; a later call within that minute is answered so without reaching the backend."""
    backend = _Busy()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            backend.mode = "busy"
            for _ in range(2):
                answer = env.post(_r16_body())
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "no_backend"
                retry = int(answer.headers["retry-after"])
                assert 1 <= retry <= 60
                assert f"for {retry} s" in answer.json()["error"]["message"]
            assert env.spent() == 0 and env.held() == []
    finally:
        backend.close()


# --- credentials sent twice ---------------------------------------------------------------------


@pytest.mark.parametrize("repeated", ["Authorization", "X-Agentgate-Invocation", "X-Agentgate-Approval"])
@pytest.mark.parametrize("order", ["valid_first", "valid_last"])
def test_a_credential_header_sent_twice_is_refused_never_resolved_by_order(
    env: Env, repeated: str, order: str
) -> None:
    """Kills: the gateway reading the first of two ``Authorization`` headers (or of two
    invocations, or approvals) and deciding the call on it: a proxy in front that checks the last
    one (or joins them) and the gateway then disagree on who is calling; with the valid one first
    the call was allowed and charged.

    Rule (docs/gateway.md, "Errors"): a request with more than one ``Authorization``,
    ``X-Agentgate-Invocation`` or ``X-Agentgate-Approval`` header is refused 401
    ``ambiguous_credentials`` naming the header, whatever their order or values; the refusal is
    audited as a deny and nothing is charged."""
    body = _body()
    signed = invocation_headers(env.agent.key, env.agent.chain, body)
    other = {
        "Authorization": f"Bearer {env.poor.chain.token}",
        "X-Agentgate-Invocation": invocation_headers(env.agent.key, env.agent.chain, body)[
            "X-Agentgate-Invocation"
        ],
        "X-Agentgate-Approval": "{}",
    }[repeated]
    headers = [("content-type", "application/json"), *signed.items()]
    valid = next((i for i, (name, _) in enumerate(headers) if name == repeated), None)
    extra = (repeated, other)
    if valid is None:  # the approval: sent twice, both unusable (the call needs none)
        headers += [extra, extra]
    elif order == "valid_first":
        headers.insert(valid + 1, extra)
    else:
        headers.insert(valid, extra)
    before, count = env.ledger(), len(env.entries())
    answer = _http.post(
        f"{env.base_url}/chat/completions", content=json.dumps(body).encode(), headers=headers, timeout=10
    )
    assert answer.status_code == 401, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "ambiguous_credentials")
    assert f"2 {repeated} headers" in error["message"]
    assert env.ledger() == before
    assert [e.kind for e in env.entries()[count:]] == ["deny"]


def test_every_content_encoding_header_counts_not_only_the_first(env: Env) -> None:
    """Kills: the body's coding read from the first ``Content-Encoding`` header only: a request
    with ``Content-Encoding: identity`` then ``Content-Encoding: gzip`` (one list, RFC 9110: a
    gzipped body) was read as uncompressed, decided and sent to a backend.

    Rule (docs/gateway.md, "Errors"): a coding other than ``identity`` in any ``Content-Encoding``
    header is refused 400 naming them all; nothing is charged and the refusal is audited."""
    body = _body()
    headers = [
        ("content-type", "application/json"),
        *invocation_headers(env.agent.key, env.agent.chain, body).items(),
        ("Content-Encoding", "identity"),
        ("Content-Encoding", "gzip"),
    ]
    before, count = env.ledger(), len(env.entries())
    answer = _http.post(
        f"{env.base_url}/chat/completions", content=json.dumps(body).encode(), headers=headers, timeout=10
    )
    assert answer.status_code == 400, answer.text
    assert "Content-Encoding 'identity, gzip' is not supported" in answer.json()["error"]["message"]
    assert env.ledger() == before
    assert [e.kind for e in env.entries()[count:]] == ["deny"]
