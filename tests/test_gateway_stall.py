"""A streaming caller that stops reading, and the simulated backend's ``n``.

A caller that read the headers of a streamed answer and then stopped reading, with its socket
open, held its connection, the backend request (and its slot) and the budget reservation for
ever: uvicorn waits for the socket to drain with no limit. Here over real HTTP on 127.0.0.1: a
raw socket client with a small receive buffer (``SO_RCVBUF``), a real ``GatewayServer`` on a
SQLite store, and a real simulated backend (``SimServer``) that streams far more than the socket
buffers on both sides hold.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import _http
import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_gateway import _free_port, wait_until_serving

from agentgate._bounded_http import STALLED, BoundedHttpToolsProtocol
from agentgate._http_limits import HttpLimits
from agentgate.cli.main import build_parser
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.dispatch.prefix import estimate_tokens, prompt_text
from agentgate.errors import InputError, Shed
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

MODEL = "llama-3.1-8b"
POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  {model}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities: [{{resource: "model:{model}"}}]
    budget: {{limit: 100000000, unit: usd_micros}}
    ttl_s: 3600
"""
STALL_S = 0.5


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    sim: SimServer
    agent: AgentIdentity
    spans: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    """The spans of ``gate`` when it was given a tracer exporting to it (the ``env`` fixture's)."""

    def kinds(self) -> list[str]:
        self.gate.flush()
        return [e.kind for e in self.gate.audit.entries()]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL), source="p.yaml")
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("stall"))
    # Fast (thousands of tokens a second, each an SSE event of ~130 bytes): a few seconds fill
    # the loopback socket buffers, which the kernel grows to several MiB.
    sim = SimServer(model_name=MODEL, time_scale=0.02).start()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": sim.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0, stream_stall_s=STALL_S).start()
    agent = gate.issue(root, name="agent", key=agent_key, role="chat")
    try:
        yield Env(gate, server, sim, agent, spans)
    finally:
        server.stop()
        sim.stop()
        gate.close()


def _request(env: Env, body: dict[str, Any]) -> bytes:
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    raw = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )


@contextlib.contextmanager
def _stalled_reader(env: Env, body: dict[str, Any]) -> Iterator[socket.socket]:
    """A connection that sent ``body``, read the answer's head, and reads nothing more."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    try:
        sock.settimeout(10)
        sock.connect(("127.0.0.1", env.server.port))
        sock.sendall(_request(env, body))
        head = b""
        while b"\r\n\r\n" not in head:
            piece = sock.recv(1)
            assert piece, "the gateway closed before answering"
            head += piece
        assert head.startswith(b"HTTP/1.1 200"), head
        yield sock
    finally:
        sock.close()


def _assert_reset(sock: socket.socket) -> None:
    """The peer reset ``sock``: not closed gracefully, nothing of the unread answer kept for it."""
    sock.settimeout(5)
    with pytest.raises(ConnectionResetError):
        while sock.recv(1 << 20):
            pass


@pytest.mark.slow
def test_a_caller_that_stops_reading_a_stream_is_cut_settled_audited_and_closed(env: Env) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me everything."}],
        "max_tokens": 100_000,
        "stream": True,
    }
    with _stalled_reader(env, body) as sock:
        deadline = time.monotonic() + 20
        while env.kinds().count("outcome") < 1:
            assert time.monotonic() < deadline, "a stalled caller held its call for ever"
            time.sleep(0.1)
        # The outcome says why: the caller stopped reading; the stream had delivered output, so
        # its reservation is charged (docs/gateway.md, "What is charged"), not left held.
        (outcome,) = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
        assert outcome.status == "error"
        assert any("stalled" in reason for reason in outcome.reasons), outcome.reasons
        states = [row[0] for row in env.gate.store.query("SELECT state FROM budget_reservations")]
        assert states and "reserved" not in states
        # The backend request was cancelled (the simulated engine has nothing left to run) ...
        assert env.sim._runner is not None
        until = time.monotonic() + 5
        while env.sim._runner.live or env.sim.engine.has_work():
            assert time.monotonic() < until, "the backend request still runs"
            time.sleep(0.05)
        # ... and the caller's connection is reset by the gateway.
        _assert_reset(sock)
    assert env.gate.verify().ok
    metrics = _http.get(env.server.url.removesuffix("/v1") + "/metrics", timeout=10).text
    assert "agentgate_gateway_streams_stalled_total 1.0" in metrics
    # The gateway still serves.
    small = {**body, "max_tokens": 4, "stream": False}
    headers = invocation_headers(env.agent.key, env.agent.chain, small)
    assert (
        _http.post(f"{env.server.url}/chat/completions", json=small, headers=headers, timeout=10).status_code
        == 200
    )


@pytest.mark.slow
def test_a_stalled_streams_span_names_its_error_type_not_the_sentence(env: Env) -> None:
    """The span's ``error.type`` (and status) of a stream cut because its caller stopped reading
    was the outcome's whole sentence ("caller_stalled: the caller read nothing of the stream for
    0.5 s; the stream was cut"), where every other failure has a low-cardinality type
    (``CallerGone``, ``BackendFailed``): the type is the sentence's code; the audit keeps the rest."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Go on."}],
        "max_tokens": 100_000,
        "stream": True,
    }
    with _stalled_reader(env, body):
        deadline = time.monotonic() + 20
        while env.kinds().count("outcome") < 1:
            assert time.monotonic() < deadline, "a stalled caller held its call for ever"
            time.sleep(0.1)
    (outcome,) = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
    assert any(reason.startswith("caller_stalled: the caller read nothing") for reason in outcome.reasons)
    (span,) = [s for s in env.spans.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert span.attributes is not None and span.attributes["error.type"] == "caller_stalled"
    assert span.attributes["agentgate.outcome"] == "error"
    assert span.status.status_code == StatusCode.ERROR and span.status.description == "caller_stalled"


class _Firehose:
    """uvicorn with the gateway's protocol (stall limit ``STALL_S``) serving an app that streams
    ``TOTAL`` bytes as fast as the connection takes them: the loopback socket buffers (several
    MiB once the kernel has grown them) fill in milliseconds, not in seconds of tokens."""

    TOTAL = 24 << 20

    def __init__(self, *, tail: bool = False) -> None:
        self.tail = tail
        """End the answer as soon as 16 KiB of it wait in the transport (below its high-water mark)."""
        self.finished: list[bool] = []
        config = uvicorn.Config(
            self._app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            interface="asgi3",
            http=BoundedHttpToolsProtocol.with_limits(HttpLimits(stall_s=STALL_S)),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        block = b"x" * (1 << 10 if self.tail else 64 << 10)
        sent = 0
        while sent < self.TOTAL:
            if self.tail and self._transport().get_write_buffer_size() > 16 << 10:
                break
            await send({"type": "http.response.body", "body": block, "more_body": True})
            sent += len(block)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self.finished.append(STALLED not in scope)

    def _transport(self) -> Any:
        (connection,) = self.server.server_state.connections
        return connection.transport  # type: ignore[attr-defined]

    def __enter__(self) -> socket.socket:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return self.sock

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        self.server.should_exit = True
        self.thread.join(10)


def test_a_caller_that_reads_slowly_but_steadily_is_not_cut() -> None:
    # The limit is on progress, not on speed: a caller that keeps reading, in bursts far slower
    # than the server writes (its send buffer stays full for four stall limits in a row),
    # gets its whole answer.
    firehose = _Firehose()
    with firehose as sock:
        time.sleep(STALL_S / 2)  # every buffer on the way fills up
        received = 0
        for _ in range(int(4 * STALL_S / 0.2)):  # a burst every 0.2 s, for four stall limits
            time.sleep(0.2)
            goal = received + (32 << 10)
            while received < goal:
                piece = sock.recv(goal - received)
                assert piece, "the server cut a caller that was reading"
                received += len(piece)
        while piece := sock.recv(1 << 20):
            received += len(piece)
            if received >= _Firehose.TOTAL:
                break
        assert received >= _Firehose.TOTAL
    assert firehose.finished == [True]


def test_a_finished_answer_whose_tail_the_caller_never_reads_does_not_hold_the_connection() -> None:
    # The answer ended with its last KiBs in the transport's buffer, under the high-water mark
    # (writing never paused) behind full socket buffers: uvicorn's close after the keep-alive
    # timeout waited for them for ever, holding the connection and MiBs of kernel buffers.
    firehose = _Firehose(tail=True)
    with firehose as sock:
        started = time.monotonic()  # held for ever is the defect: 30 s tells it from a slow machine
        while not firehose.finished:
            assert time.monotonic() < started + 30
            time.sleep(0.05)
        assert firehose.finished == [True]  # a complete answer, as far as the app knows
        while firehose.server.server_state.connections:
            assert time.monotonic() < started + 30, "the connection is held for ever"
            time.sleep(0.05)
        _assert_reset(sock)


def test_a_caller_that_reads_nothing_is_cut_after_the_stall_limit() -> None:
    firehose = _Firehose()
    with firehose as sock:
        started = time.monotonic()
        while not firehose.finished:  # held for ever is the defect: 30 s tells it from a slow machine
            assert time.monotonic() < started + 30, "a caller that reads nothing held its connection"
            time.sleep(0.05)
        # After the limit (plus the moment it takes to fill the buffers), not at once.
        assert time.monotonic() - started >= STALL_S
        assert firehose.finished == [False]  # the app saw its caller gone, and the mark
        _assert_reset(sock)


@pytest.mark.parametrize("stall", [0, -1, float("inf"), float("nan"), True])
def test_a_stall_limit_that_is_not_a_positive_number_of_seconds_is_refused(env: Env, stall: Any) -> None:
    with pytest.raises(InputError, match="stall"):
        GatewayServer(env.server.gateway, port=0, stream_stall_s=stall)


@pytest.mark.slow
def test_agentgate_serve_takes_its_limits_and_stops_on_sigterm_with_outcomes_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL))
    command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
    for option, bad in [("--stream-stall-s", b) for b in ("0", "-1", "inf", "soon")] + [
        ("--shutdown-grace-s", b) for b in ("-1", "1.5", "soon")
    ]:
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(["serve", "--policy", "p", "--inventory", "i", option, bad])
        assert refused.value.code == 2
        assert option in capsys.readouterr().err
    with SimServer(model_name=MODEL, time_scale=0.02) as sim:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            f"backends:\n  - {{name: sim, url: '{sim.url}', engine: vllm, models: [{MODEL}]}}\n"
        )
        store = tmp_path / "serve.db"
        port = _free_port()
        issuer = GatewayGate(parse_policy(policy.read_text(), source=str(policy)), SQLiteStore(store))
        agent = issuer.issue(root, name="agent", key=agent_key, role="chat")
        command += ["--inventory", str(inventory), "--store", str(store), "--port", str(port)]
        command += ["--stream-stall-s", "0.5", "--shutdown-grace-s", "1"]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        try:
            wait_until_serving(f"http://127.0.0.1:{port}", process)
            env = Env(issuer, cast(GatewayServer, _Port(port)), sim, agent)
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Tell me everything."}],
                "max_tokens": 100_000,
                "stream": True,
            }
            with _stalled_reader(env, body):
                deadline = time.monotonic() + 30
                while not (outcomes := [e for e in issuer.audit.entries() if e.kind == "outcome"]):
                    assert time.monotonic() < deadline, "agentgate serve held a stalled caller"
                    time.sleep(0.2)
            assert any("for 0.5 s" in reason for reason in outcomes[0].reasons), outcomes[0].reasons
            # SIGTERM (what a service manager sends) with a stream in flight: uvicorn raised the
            # signal again after its graceful shutdown, which killed the process (exit -15)
            # before the gate committed the cut stream's outcome: its reservation stayed held
            # and the log had an allow with no outcome. It ends as Ctrl-C does now.
            signed = invocation_headers(agent.key, agent.chain, body)
            events: list[str] = []
            cut = False
            with _http.Client(timeout=30) as http:
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                with http.stream("POST", url, json=body, headers=signed) as answer:
                    assert answer.status_code == 200
                    lines = answer.iter_lines()
                    next(lines)
                    process.terminate()
                    # The stream ends with a shutting_down error event; a caller that lags behind
                    # by more than the socket buffers may see the connection cut instead, when the
                    # process exits before the event leaves its buffer (docs/gateway.md).
                    try:
                        events.extend(line for line in lines if line.startswith("data: "))
                    except httpx.RemoteProtocolError:
                        cut = True
            if not cut:
                assert json.loads(events[-1][6:])["error"]["code"] == "shutting_down"
            _, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            assert "Traceback" not in err, err  # the cut stream ends with an error event, not a traceback
            outcomes = [e for e in issuer.audit.entries() if e.kind == "outcome"]
            assert len(outcomes) == 2
            states = [row[0] for row in issuer.store.query("SELECT state FROM budget_reservations")]
            assert len(states) == 2 and "reserved" not in states
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=20)
            issuer.close()


@dataclass
class _Port:
    port: int


# --- SimServer and `n` -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra", [{"n": 3}, {"n": 0}, {"n": True}, {"n": "2"}, {"best_of": 2}, {"n": 2, "stream": True}]
)
def test_the_simulated_backend_refuses_several_choices_rather_than_answer_one(extra: dict[str, Any]) -> None:
    # SimServer ignored `n`: asked for 3 choices it generated and answered one, with the usage of
    # one, so anything measured through it (a gateway's charge for n choices, latency under n)
    # was off by n. It serves one choice per request and says so, as an OpenAI-style 400.
    with SimServer(time_scale=0.05) as sim, _http.Client() as http:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        answer = http.post(f"{sim.url}/v1/chat/completions", json={**body, **extra})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        name = "best_of" if "best_of" in extra else "n"
        assert error["type"] == "invalid_request_error" and error["message"].startswith(f"{name}: ")
        # A value that is no whole number (`true`, `"2"`) is refused as such since review R61 (the
        # simulator reads integer fields as vLLM's lax pydantic does, text and booleans aside).
        whole = not isinstance(extra.get("n", 0), (bool, str))
        assert ("one choice" if whole else "valid integer") in error["message"]
        assert sim.served == 0 and not sim.engine.has_work()
        for one in ({"n": 1}, {"n": None}, {"best_of": 1}):
            reply = http.post(f"{sim.url}/v1/chat/completions", json={**body, **one})
            assert reply.status_code == 200 and len(reply.json()["choices"]) == 1


# --- a caller that leaves a JSON (non-streamed) call -------------------------------------------


def test_a_caller_gone_during_a_json_call_stops_the_backend_and_is_charged_its_reservation(env: Env) -> None:
    # The gateway went on waiting for the backend's whole answer (here 100,000 tokens, seconds of
    # GPU) for a caller that had hung up: its slot stayed busy, and a client's timeout-and-retry
    # doubled the work. The backend request is now cancelled when the caller goes; what the
    # backend produced cannot be read, so the call is charged its reservation (never less than
    # may have been used, as for an abandoned stream), audited as an error that says so.
    # 100,000 tokens: about 13 s of generation at this backend's time scale, against the
    # moment it takes to notice a caller gone (0.1 s; the bound below is 2.5 s).
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a book."}], "max_tokens": 100_000}
    with socket.create_connection(("127.0.0.1", env.server.port)) as sock:
        sock.sendall(_request(env, body))
        until = time.monotonic() + 5
        while not env.sim.engine.has_work():  # the backend is generating
            assert time.monotonic() < until
            time.sleep(0.02)
    left = time.monotonic()
    while env.sim.engine.has_work() or env.kinds().count("outcome") < 1:
        assert time.monotonic() - left < 2.5, "the backend went on generating for a caller that left"
        time.sleep(0.05)
    (outcome,) = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
    assert outcome.status == "error" and "CallerGone" in outcome.reasons, outcome.reasons
    assert env.gate.budget_usage(env.agent)[env.agent.chain.root.id][0] == _reserved(body)
    assert env.gate.verify().ok


def _reserved(body: dict[str, Any]) -> int:
    """What the gateway reserves for ``body`` at one micro-dollar a token (the tests' policy)."""
    return estimate_tokens(prompt_text(body["messages"])) + int(body["max_tokens"])


def test_a_json_call_cut_by_the_gateways_shutdown_is_charged_its_reservation(tmp_path: Path) -> None:
    # Stopping the gateway cancels the calls still running after shutdown_grace_s. A JSON call
    # was settled as a plain cancellation, reservation released: the backend's output until then
    # (here seconds of it) was never charged, on every restart. It is charged as reserved now.
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        with SimServer(model_name=MODEL, time_scale=1.0) as sim:  # real time: about 100 tokens/s
            inventory = inventory_from_mapping(
                {"backends": [{"name": "sim", "url": sim.url, "engine": "vllm", "models": [MODEL]}]}
            )
            server = GatewayServer(Gateway(gate, inventory), port=0, shutdown_grace_s=1).start()
            agent = gate.issue(root, name="agent", key=agent_key, role="chat")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 2_000}
            headers = invocation_headers(agent.key, agent.chain, body)
            answers: list[int | str] = []

            def call() -> None:
                try:
                    answers.append(
                        _http.post(
                            f"{server.url}/chat/completions", json=body, headers=headers, timeout=30
                        ).status_code
                    )
                except httpx.TransportError as exc:
                    answers.append(type(exc).__name__)

            caller = threading.Thread(target=call)
            caller.start()
            until = time.monotonic() + 5
            while not sim.engine.has_work():
                assert time.monotonic() < until
                time.sleep(0.02)
            server.stop()
            caller.join(30)
            until = time.monotonic() + 5
            while sim.engine.has_work():  # the backend request was cancelled too
                assert time.monotonic() < until
                time.sleep(0.05)
        gate.flush()
        (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert outcome.status == "error", outcome
        assert gate.budget_usage(agent)[agent.chain.root.id][0] == _reserved(body)
        assert answers and answers[0] != 200, answers
    finally:
        gate.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time_scale": 0},
        {"time_scale": -1.0},
        {"time_scale": float("nan")},
        {"scrape_lag_s": -1},
        {"max_model_len": 1},
        {"max_model_len": 0},
    ],
)
def test_a_simulated_backend_with_impossible_settings_is_refused_when_made(kwargs: dict[str, Any]) -> None:
    # time_scale=0 made every request a 500 (a division by zero in the engine's clock, with a
    # traceback), a negative one answered at once, max_model_len 0 refused every request: all
    # silently, from a server that had started fine.
    with pytest.raises(InputError, match=next(iter(kwargs))):
        SimServer(**kwargs)


def test_a_caller_gone_before_a_streams_first_token_stops_the_backend_at_once(tmp_path: Path) -> None:
    # The gateway waits for a stream's first chunk before answering (so that a failure is still
    # an HTTP status). A caller that left meanwhile (a client timeout under load, then a retry)
    # left its request to queue and prefill for nobody until that first token: here a 100k-token
    # prompt, seconds of prefill. It is cancelled when the caller goes; the prefill was work done,
    # so (since R44, as a JSON call cut so) it is charged its reservation, and the outcome says
    # the caller went away.
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        # At time scale 2 the prompt's prefill takes about 16 s, against the moment it takes to
        # notice a caller gone (0.1 s; the bound below is 2.5 s).
        with SimServer(model_name=MODEL, time_scale=2.0) as sim:
            inventory = inventory_from_mapping(
                {"backends": [{"name": "sim", "url": sim.url, "engine": "vllm", "models": [MODEL]}]}
            )
            server = GatewayServer(Gateway(gate, inventory), port=0).start()
            try:
                agent = gate.issue(root, name="agent", key=agent_key, role="chat")
                env = Env(gate, server, sim, agent)
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "y" * 400_000}],
                    "max_tokens": 8,
                    "stream": True,
                }
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    sock.sendall(_request(env, body))
                    until = time.monotonic() + 5
                    while not sim.engine.has_work():  # prefilling
                        assert time.monotonic() < until
                        time.sleep(0.02)
                left = time.monotonic()
                while sim.engine.has_work() or env.kinds().count("outcome") < 1:
                    assert time.monotonic() - left < 2.5, "the backend went on for a caller that left"
                    time.sleep(0.05)
                (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
                assert outcome.status == "error" and "CallerGone" in outcome.reasons, outcome.reasons
                assert any("charged as reserved" in r for r in outcome.reasons)
                assert outcome.budget_delta and outcome.budget_delta > 0
                assert gate.budget_usage(agent)[agent.chain.root.id][0] == outcome.budget_delta
                assert gate.verify().ok
            finally:
                server.stop()
    finally:
        gate.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_caller_gone_while_its_call_is_being_decided_is_never_sent(
    env: Env, tmp_path: Path, stream: bool
) -> None:
    # Under load (another call in flight) the decision runs in a worker thread while the event
    # loop goes on: a caller that closed its connection then was noticed before any hook was
    # set, and its call was sent to a backend for nobody, to run to its end. It is not sent now,
    # and its reservation is released (nothing ran), the outcome saying the caller went away.
    other = {"model": MODEL, "messages": [{"role": "user", "content": "Long."}], "max_tokens": 20_000}
    background = threading.Thread(
        target=httpx.post,
        args=(f"{env.server.url}/chat/completions",),
        kwargs={
            "json": other,
            "headers": invocation_headers(env.agent.key, env.agent.chain, other),
            "timeout": 30,
        },
    )
    background.start()
    until = time.monotonic() + 5
    while not env.sim.engine.has_work():  # the other call is decided and running
        assert time.monotonic() < until
        time.sleep(0.02)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Short."}],
        "max_tokens": 4,
        "stream": stream,
    }
    locker = sqlite3.connect(tmp_path / "agentgate.db", isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")  # the decision waits for the store's write lock
        with socket.create_connection(("127.0.0.1", env.server.port)) as sock:
            sock.sendall(_request(env, body))
            time.sleep(0.5)
        time.sleep(0.3)  # the gateway sees the connection closed while deciding
        locker.execute("COMMIT")
    finally:
        locker.close()
    background.join(30)
    until = time.monotonic() + 5
    while env.kinds().count("outcome") < 2:
        assert time.monotonic() < until
        time.sleep(0.05)
    assert env.sim.served == 1, "a call was sent to the backend for a caller that had left"
    outcomes = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
    gone = [o for o in outcomes if "CallerGone" in o.reasons]
    assert len(gone) == 1 and gone[0].status == "error"
    assert env.gate.verify().ok


def test_a_call_shed_after_a_failed_attempt_does_not_tell_the_caller_which_backend_failed() -> None:
    # Since the dispatcher keeps a shed after failed attempts a Shed (9bc37fb), its message ends
    # with what failed before: backend names, addresses, their bytes. The gateway passed the
    # message on in the 429; it answers the router's own reason now, and logs the rest.
    from agentgate.dispatch.gateway import _errors as gateway_errors

    shed = Shed(
        "SLO 2.00s cannot be met (best predicted 2.51s); class 1 shed "
        "(after: gpu-node-17: malformed chat completion: b'\\x00\\xffnot json')",
        retry_after_s=3,
    )
    answer = gateway_errors._dispatch_error(shed)
    assert answer.status_code == 429 and answer.headers["Retry-After"] == "3"
    message = json.loads(answer.body)["error"]["message"]
    assert message == "SLO 2.00s cannot be met (best predicted 2.51s); class 1 shed"


def test_a_stream_whose_caller_hangs_up_mid_answer_is_audited_as_caller_gone(env: Env) -> None:
    # The outcome of a stream abandoned mid-answer said only "CancelledError", the same as a
    # stream cut by a shutdown: the log could not tell a caller that left from the gateway
    # stopping. It says CallerGone; charged its reservation, as documented.
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Go."}],
        "max_tokens": 20_000,
        "stream": True,
    }
    with socket.create_connection(("127.0.0.1", env.server.port)) as sock:
        sock.sendall(_request(env, body))
        received = b""
        while received.count(b"data: ") < 5:
            received += sock.recv(4096)
    until = time.monotonic() + 10
    while env.kinds().count("outcome") < 1:
        assert time.monotonic() < until
        time.sleep(0.05)
    (outcome,) = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
    assert outcome.status == "error" and "CallerGone" in outcome.reasons, outcome.reasons
    assert env.gate.budget_usage(env.agent)[env.agent.chain.root.id][0] == _reserved(body)
