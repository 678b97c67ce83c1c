"""(From review R4) the gateway as a remote client sees it, end to end over real HTTP on 127.0.0.1.

A scripted OpenAI-compatible backend (``_Scripted``: answers as vLLM does, honouring ``n``, with
modes for a missing usage, tool calls, a stream that dies) and simulated backends
(``agentgate.sim``) sit behind a real ``GatewayServer`` on a real SQLite store; the callers are
raw sockets, httpx and the ``openai`` client.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _http
import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from test_gateway import MODEL, NAMES, _policy_text

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import (
    Gateway,
    GatewayGate,
    GatewayServer,
    InvocationSigner,
    invocation_headers,
)
from agentgate.dispatch.gateway import _errors as gateway_errors
from agentgate.dispatch.prefix import estimate_tokens, prompt_text
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore


class _Scripted:
    """An OpenAI-compatible backend on 127.0.0.1 whose answers follow ``mode``."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.bodies: list[dict[str, Any]] = []
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/health", self._health),
                Route("/metrics", self._metrics),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def start(self) -> _Scripted:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    async def _health(self, request: Request) -> Response:
        return Response("ok")

    async def _metrics(self, request: Request) -> Response:
        return Response("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.bodies.append(body)
        n, max_tokens, mode = body.get("n") or 1, body["max_tokens"], self.mode
        usage = {"prompt_tokens": 5, "completion_tokens": n * max_tokens}
        if not body.get("stream"):
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "x" * max_tokens},
                    "finish_reason": "length",
                }
                for i in range(n)
            ]
            answer: dict[str, Any] = {
                "id": "c",
                "object": "chat.completion",
                "choices": choices,
                "usage": usage,
            }
            if mode == "no_usage":
                del answer["usage"]
            return JSONResponse(answer)

        async def events() -> AsyncIterator[str]:
            if mode in ("tools", "tools_die"):  # as vLLM streams a tool call: fragments of arguments
                for i, piece in enumerate(_TOOL_CALL_PIECES):
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                    if i == 0:
                        call.update(id="call_1", type="function")
                        call["function"]["name"] = "get_weather"
                    delta = {
                        "index": 0,
                        "delta": {"content": None, "tool_calls": [call]},
                        "finish_reason": None,
                    }
                    yield "data: " + json.dumps({"id": "c", "choices": [delta], "usage": None}) + "\n\n"
                if mode == "tools_die":
                    return
                end = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
                yield "data: " + json.dumps({"id": "c", "choices": [end]}) + "\n\n"
                yield "data: " + json.dumps({"id": "c", "choices": [], "usage": usage}) + "\n\n"
                yield "data: [DONE]\n\n"
                return
            for i in range(max_tokens):
                delta = {"index": 0, "delta": {"content": "x"}, "finish_reason": None}
                if mode == "sse_fields":  # SSE's other fields, as a server may send them
                    yield f"event: message\nid: {i}\nretry: 1000\n"
                yield "data: " + json.dumps({"id": "c", "choices": [delta]}) + "\n\n"
                if mode == "slow":
                    await asyncio.sleep(0.1)
                if mode == "die" and i == 2:
                    return  # the engine is gone: no usage, no [DONE]
            yield "data: " + json.dumps({"id": "c", "choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


_TOOL_CALL_PIECES = ("", '{"city": ', '"Paris"}')


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    agent: AgentIdentity
    backend: _Scripted

    @property
    def url(self) -> str:
        return f"{self.server.url}/chat/completions"

    def post(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        signed = invocation_headers(self.agent.key, self.agent.chain, body)
        return _http.post(self.url, json=body, headers={**signed, **headers}, timeout=10)

    def spent(self) -> int:
        self.gate.flush()
        return self.gate.budget_usage(self.agent)[self.agent.chain.root.id][0]

    def kinds(self) -> list[str]:
        self.gate.flush()
        return [e.kind for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]


@pytest.fixture(scope="module")
def scripted() -> Iterator[_Scripted]:
    backend = _Scripted().start()
    yield backend
    backend.stop()


@contextlib.contextmanager
def _gateway(tmp_path: Path, backend: _Scripted, policy_extra: str = "") -> Iterator[Env]:
    backend.mode = "ok"
    backend.bodies.clear()
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}) + policy_extra
    gate = GatewayGate(parse_policy(text, source="gateway.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "scripted", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield Env(gate, server, agent, backend)
    finally:
        server.stop()
        gate.close()


@pytest.fixture
def env(tmp_path: Path, scripted: _Scripted) -> Iterator[Env]:
    with _gateway(tmp_path, scripted) as made:
        yield made


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something short."}],
        "max_tokens": 8,
        **extra,
    }


def _reserved(body: dict[str, Any]) -> int:
    """What the gateway reserves for ``body`` at one micro-dollar a token (the tests' policy)."""
    return estimate_tokens(prompt_text(body["messages"])) + int(body["max_tokens"])


# --- defects found, now fixed -----------------------------------------------------------------


@pytest.mark.parametrize("extra", [{"n": 4}, {"best_of": 3}, {"n": True}, {"n": "2"}])
def test_several_choices_are_refused_before_anything_is_reserved_or_sent(
    env: Env, extra: dict[str, Any]
) -> None:
    # vLLM generates n x max_tokens for n choices: the signed max_tokens (and a grant's cap on it)
    # and the reservation held a quarter of what n=4 produced, which was still answered and charged
    # beyond the reservation. One choice per call now; the refusal is audited, nothing reserved.
    answer = env.post(_body(**extra))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_request" and "one choice" in answer.text
    assert env.backend.bodies == [] and env.spent() == 0 and env.kinds() == ["deny"]
    assert env.post(_body(n=1)).status_code == 200  # n=1 is one choice


def test_an_answer_without_usage_is_charged_its_reservation_not_nothing(env: Env) -> None:
    # A backend that omits usage (or reports no completion count) answered the caller: it was
    # charged 0, an unrecorded spend. It is charged the whole reservation, as a cut stream is.
    env.backend.mode = "no_usage"
    body = _body()
    answer = env.post(body)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
    assert env.spent() == _reserved(body)
    assert env.kinds() == ["allow", "outcome"]


def test_an_expired_invocation_is_401_not_403(env: Env) -> None:
    # docs/gateway.md: invocation_expired (and an expired or broken chain) is 401; the status
    # followed the finding's kind (scope creep), so it answered 403 as if the grant did not cover it.
    body = _body()
    headers = invocation_headers(env.agent.key, env.agent.chain, body, ttl=1)
    time.sleep(2.1)
    answer = _http.post(env.url, json=body, headers=headers, timeout=10)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == {
        "message": answer.json()["error"]["message"],
        "type": "authentication_error",
        "param": None,
        "code": "invocation_expired",
    }
    assert env.spent() == 0 and env.kinds() == ["deny"]
    # It says what gets the call through (a fresh invocation), not "do not retry".
    message = answer.json()["error"]["message"]
    assert "Sign the call again" in message and "Do not retry" not in message


def test_a_streamed_tool_call_reaches_the_openai_client(env: Env) -> None:
    # The gateway re-encoded each streamed delta from its content only: the tool call fragments
    # were dropped, and the caller got finish_reason "tool_calls" with no call at all.
    env.backend.mode = "tools"
    signer = InvocationSigner(env.agent.key, env.agent.chain)
    with openai.OpenAI(
        base_url=env.server.url,
        api_key=env.agent.chain.token,
        http_client=signer.client(verify=_http.TLS),
        max_retries=0,
    ) as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            max_tokens=32,
            stream=True,
            tools=[
                {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
            ],
        )
        chunks = [c for c in stream if c.choices]
    calls = [call for c in chunks for call in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id == "call_1" and calls[0].function and calls[0].function.name == "get_weather"
    assert "".join(c.function.arguments or "" for c in calls if c.function) == '{"city": "Paris"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert env.spent() == 5 + 32  # the usage the backend reported
    assert env.kinds() == ["allow", "outcome"]


def test_a_stream_cut_after_tool_call_fragments_is_charged_as_reserved(env: Env) -> None:
    # Tool call fragments are output delivered: a cut stream is charged its reservation, not released.
    env.backend.mode = "tools_die"
    body = _body(stream=True)
    answer = env.post(body)
    assert answer.status_code == 200 and '"tool_calls"' in answer.text
    assert env.spent() == _reserved(body)


def test_a_prompt_longer_than_the_slo_allows_is_served_on_an_idle_pool_not_shed_for_ever(env: Env) -> None:
    # 100k tokens (Llama 3.1 takes 128k) prefill in about 7 s on an idle H200; the gateway's SLO is
    # 2 s. The router shed it at once with 429 and Retry-After: 1, on every retry, on an idle pool.
    body = _body(messages=[{"role": "user", "content": "y" * 400_000}], max_tokens=4)
    answer = env.post(body)
    assert answer.status_code == 200, answer.text
    assert env.kinds() == ["allow", "outcome"] and env.spent() == 5 + 4


def test_tool_definitions_count_in_the_prompt_reserved(env: Env) -> None:
    # The reservation counted the messages only: 40 KB of tool schemas (rendered into the prompt
    # by the chat template, about 10k tokens) were reserved as nothing, so a small budget
    # admitted a call whose prompt alone overran it.
    schema = {"type": "object", "description": "d" * 40_000}
    body = _body(tools=[{"type": "function", "function": {"name": "lookup", "parameters": schema}}])
    assert env.post(body).status_code == 200
    (amount,) = env.gate.store.query("SELECT amount FROM budget_reservations")[0]
    assert amount >= _reserved(body) + 40_000 // 4


def _raw(env: Env, data: bytes, *, wait: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=wait) as sock:
        with contextlib.suppress(OSError):  # refused while it was still being sent
            sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_a_request_head_over_64_kib_is_431_and_never_buffered_whole(env: Env) -> None:
    # uvicorn's httptools protocol had no bound: a 50 MB header line was read whole into memory.
    body = json.dumps(_body()).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100_000
    answer = _raw(env, head + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert env.backend.bodies == [] and env.kinds() == []
    # A large body (not head) is still read: the bound is on the head only.
    big = _body(messages=[{"role": "user", "content": "y" * 100_000}], max_tokens=4)
    assert env.post(big).status_code == 200


def test_a_head_sent_too_slowly_is_408(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env.server.server.config.http, "head_timeout_s", 0.3)  # the server's own class
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.6)
        received = b""
        while piece := sock.recv(4096):  # the whole answer, then the close
            received += piece
        assert received.startswith(b"HTTP/1.1 408 ")
    # A connection that never sends a byte is closed the same way.
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=5) as sock:
        assert sock.recv(200).startswith(b"HTTP/1.1 408 ")
    assert env.post(_body()).status_code == 200  # a normal caller is untouched


def test_a_body_trickled_too_slowly_is_refused_and_audited(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env.server.gateway, "body_timeout_s", 0.3)
    body = json.dumps(_body()).encode()
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        sock.sendall(body[:10])
        answer = sock.recv(4096)
    # A 408 since review R54 (a 400 before: the request was not malformed, and no client retries one).
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within" in answer
    assert env.backend.bodies == [] and env.kinds() == ["deny"]


def test_concurrent_callers_against_a_quota_get_exactly_its_limit_and_429_with_retry_after(
    tmp_path: Path, scripted: _Scripted
) -> None:
    # The quota 429 carried no Retry-After (the shed one did): clients retried blind. Now the
    # seconds to the quota's window end. 12 callers at once against 5 calls a window: 5 served.
    # The longest window (10 years): windows are aligned to the epoch, and an hour's could roll
    # over while the 12 calls are decided, serving more than 5.
    window = 315_360_000
    quota = f"quotas:\n  agent-calls: {{principal: agent, window_s: {window}, limit: 5}}\n"
    with _gateway(tmp_path, scripted, quota) as env, ThreadPoolExecutor(max_workers=12) as pool:
        first = time.time()
        answers = list(
            pool.map(lambda i: env.post(_body(messages=[{"role": "user", "content": f"q{i}"}])), range(12))
        )
        last = time.time()
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] * 5 + [429] * 7, statuses
        # Retry-After: the seconds from its refusal to the window's end, rounded up.
        most, least = (math.ceil(window - t % window) for t in (first, last))
        for refused in (a for a in answers if a.status_code == 429):
            assert refused.json()["error"]["code"] == "quota_exceeded"
            assert least <= int(refused.headers["Retry-After"]) <= most
            assert "Retry once the quota's window has passed" in refused.json()["error"]["message"]
        kinds = env.kinds()
        assert kinds.count("allow") == 5 and kinds.count("deny") == 7 and kinds.count("outcome") == 5
        assert env.spent() == 5 * (5 + 8) and env.gate.verify().ok


# --- what held up -----------------------------------------------------------------------------


def test_a_stream_whose_backend_dies_ends_with_an_error_event_and_is_charged_as_reserved(env: Env) -> None:
    env.backend.mode = "die"
    body = _body(stream=True)
    answer = env.post(body)
    assert answer.status_code == 200
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert events[-1] != "data: [DONE]" and json.loads(events[-1][6:])["error"]["code"] == "backend_failed"
    assert "scripted" not in events[-1]  # the backend's name stays in the gateway's log
    assert env.spent() == _reserved(body)
    assert env.kinds() == ["allow", "outcome"] and env.gate.verify().ok


def test_a_caller_gone_before_the_first_token_leaves_a_settled_outcome(env: Env) -> None:
    body = _body(stream=True, max_tokens=64)
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    raw = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", env.server.port)) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
    deadline = time.monotonic() + 10
    while env.kinds().count("outcome") < 1:
        assert time.monotonic() < deadline, "the abandoned call left no outcome"
        time.sleep(0.05)
    held = env.gate.store.query("SELECT state FROM budget_reservations")
    assert [row[0] for row in held] != ["reserved"]
    assert env.gate.verify().ok


@pytest.mark.parametrize("fault", ["error", "garbage"])
def test_a_backend_answering_500_or_garbage_is_a_clear_502_or_503_with_nothing_charged(
    tmp_path: Path, fault: str
) -> None:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    with SimServer(model_name=MODEL, time_scale=0.01) as sim:
        sim.fault = fault  # type: ignore[assignment]
        inventory = inventory_from_mapping(
            {"backends": [{"name": "gpu-node-17", "url": sim.url, "engine": "vllm", "models": [MODEL]}]}
        )
        server = GatewayServer(Gateway(gate, inventory), port=0).start()
        try:
            agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
            env = Env(gate, server, agent, _Scripted())
            for stream in (False, True):
                answer = env.post(_body(stream=stream))
                # 429 shed: the dispatcher's retry after the failure was shed (dispatcher 9bc37fb);
                # its message named the failed backend and its bytes until review F1.
                assert answer.status_code in (429, 502, 503), answer.text
                error = answer.json()["error"]
                assert error["code"] in ("backend_failed", "no_backend", "shed") and error["message"]
                # The remote caller learns no backend name, address or bytes (they were passed on).
                port = sim.url.rsplit(":", 1)[1]
                assert not any(leak in answer.text for leak in ("gpu-node-17", port, "not json", "HTTP 500"))
            assert env.spent() == 0
            assert env.kinds() == ["allow", "outcome"] * 2 and gate.verify().ok
            assert all(e.status == "error" for e in gate.audit.entries() if e.kind == "outcome")
        finally:
            server.stop()
            gate.close()


def test_an_invocation_replayed_to_a_second_gateway_on_the_same_store_is_401(
    tmp_path: Path, scripted: _Scripted
) -> None:
    with _gateway(tmp_path, scripted) as env:
        other_gate = GatewayGate(env.gate.policy, SQLiteStore(tmp_path / "agentgate.db"))
        inventory = inventory_from_mapping(
            {"backends": [{"name": "scripted", "url": scripted.url, "engine": "vllm", "models": [MODEL]}]}
        )
        other = GatewayServer(Gateway(other_gate, inventory), port=0).start()
        try:
            body = _body()
            headers = invocation_headers(env.agent.key, env.agent.chain, body)
            assert _http.post(env.url, json=body, headers=headers, timeout=10).status_code == 200
            replay = _http.post(f"{other.url}/chat/completions", json=body, headers=headers, timeout=10)
            assert replay.status_code == 401 and replay.json()["error"]["code"] == "replayed_invocation"
            assert len(scripted.bodies) == 1
        finally:
            other.stop()
            other_gate.close()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"model": "qwen3-32b"}, "call_mismatch"),  # signed for one model, sent for another
        ({"max_tokens": 9}, "args_digest_mismatch"),  # a larger output limit than was signed
        ({"temperature": 0.5}, "args_digest_mismatch"),  # any other field of the body changed
    ],
)
def test_a_body_other_than_the_one_signed_is_401_and_reaches_no_backend(
    env: Env, change: dict[str, Any], code: str
) -> None:
    signed = _body()
    headers = invocation_headers(env.agent.key, env.agent.chain, signed)
    answer = _http.post(env.url, json={**signed, **change}, headers=headers, timeout=10)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == code, answer.text
    assert env.backend.bodies == [] and env.spent() == 0 and env.kinds() == ["deny"]


def test_a_shed_call_answers_the_routers_retry_after_not_always_one_second() -> None:
    # docs/dispatch.md: Retry-After = the tenant bucket's refill time; the gateway sent "1" always.
    from agentgate.errors import Shed

    answer = gateway_errors._dispatch_error(Shed("tenant 'lab' is over its token quota", retry_after_s=7.2))
    assert answer.status_code == 429 and answer.headers["Retry-After"] == "8"


def test_a_compressed_body_is_a_400_that_says_so(env: Env) -> None:
    # A gzip'd body was refused as "not JSON ('utf-8' codec can't decode byte 0x8b...)".
    body = _body()
    headers = {**invocation_headers(env.agent.key, env.agent.chain, body), "Content-Encoding": "gzip"}
    answer = _http.post(
        env.url, content=gzip.compress(json.dumps(body).encode()), headers=headers, timeout=10
    )
    assert answer.status_code == 400 and "Content-Encoding 'gzip' is not supported" in answer.text
    assert env.backend.bodies == [] and env.kinds() == ["deny"]


def test_stopping_the_gateway_does_not_wait_for_ever_on_a_stream_and_settles_it(
    tmp_path: Path, scripted: _Scripted
) -> None:
    # uvicorn waited for every call in flight with no limit: a stream (here 50 s of tokens) held
    # GatewayServer.stop past its 10 s join, the server thread lived on, and `agentgate serve`
    # could not stop. Now calls get shutdown_grace_s, then are cancelled and settled.
    with _gateway(tmp_path, scripted) as env:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "scripted", "url": scripted.url, "engine": "vllm", "models": [MODEL]}]}
        )
        server = GatewayServer(Gateway(env.gate, inventory), port=0, shutdown_grace_s=1).start()
        scripted.mode = "slow"
        body = _body(stream=True, max_tokens=500)
        headers = invocation_headers(env.agent.key, env.agent.chain, body)
        with (
            _http.Client(timeout=30) as http,
            http.stream("POST", f"{server.url}/chat/completions", json=body, headers=headers) as answer,
        ):
            assert answer.status_code == 200
            next(line for line in answer.iter_lines() if line.startswith("data: {"))
            thread = server._thread
            started = time.monotonic()
            server.stop()
            assert thread is not None and not thread.is_alive()
            assert time.monotonic() - started < 8
        env.gate.flush()
        outcomes = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
        assert [o.status for o in outcomes] == ["error"] and env.spent() == _reserved(body)


@pytest.mark.parametrize(
    ("max_tokens", "status", "code"),
    [
        (None, 403, "call_not_covered"),  # absent: DEFAULT_MAX_TOKENS (1,024), over the grant's 512
        (1_000_000, 403, "call_not_covered"),  # huge: over the grant's cap, refused before any backend
        (1_000_001, 400, "invalid_request"),  # past the gateway's own bound
        ("100", 400, "invalid_request"),
        (0, 400, "invalid_request"),
    ],
)
def test_max_tokens_absent_huge_or_not_a_count_never_reaches_a_backend(
    env: Env, max_tokens: Any, status: int, code: str
) -> None:
    body = {k: v for k, v in _body(max_tokens=max_tokens).items() if v is not None}
    signed = {k: v for k, v in _body(max_tokens=8).items() if k != "max_tokens"} if status == 400 else body
    headers = invocation_headers(env.agent.key, env.agent.chain, signed)
    answer = _http.post(env.url, json=body, headers=headers, timeout=10)
    assert answer.status_code == status and answer.json()["error"]["code"] == code, answer.text
    assert env.backend.bodies == [] and env.spent() == 0 and env.kinds() == ["deny"]


def test_a_store_that_cannot_record_the_decision_is_a_503_not_a_traceback(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    # The StoreError escaped the handler: uvicorn logged "Exception in ASGI application" with a
    # traceback and the caller got a bare text/plain 500. Nothing reached a backend (fail closed).
    assert env.post(_body()).status_code == 200
    env.gate.flush()
    env.gate.store.close()
    for stream in (False, True):
        answer = env.post(_body(stream=stream))
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "store_unavailable"
    assert len(env.backend.bodies) == 1
    assert "cannot record a decision: StoreError" in caplog.text  # one line, in the gateway's log


def test_sse_event_id_and_retry_fields_from_a_backend_are_read_past_not_a_failure(env: Env) -> None:
    # Only "data:" lines and comments were read; a spec-valid "event:", "id:" or "retry:" line
    # failed the stream as "not an SSE event" (502 before output, a cut stream after).
    env.backend.mode = "sse_fields"
    answer = env.post(_body(stream=True))
    assert answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]"), answer.text
    assert env.spent() == 5 + 8
