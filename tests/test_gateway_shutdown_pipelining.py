"""The gateway with pipelined requests, and a stream cut by the end of its shutdown grace.

Over real HTTP on 127.0.0.1: a real ``GatewayServer`` on a SQLite store in front of a real
simulated backend (``SimServer``), raw socket clients for what ordinary clients never do (several
requests written at once on one kept-alive connection; a caller that lags behind its stream).

- Pipelining: uvicorn queues a request sent before the previous one is answered and points its
  ``cycle`` at the queued one; the stall and caller-gone marks went there, so a running stream
  cut for a stalled caller was audited without its reason, and a running JSON call whose caller
  hung up was never told (its backend request ran to its end).
- Shutdown: a stream cut when the shutdown grace ran out was audited ``CancelledError``; it is
  ``GatewayStopped`` now. Its last event (``shutting_down``) was lost when the caller lagged:
  the process exited with the event still in the gateway's send buffer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from test_gateway_stall import MODEL, POLICY

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.dispatch.gateway import _stream as gateway_stream
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

STREAM = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me everything."}],
    "max_tokens": 100_000,
    "stream": True,
}


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    sim: SimServer
    agent: AgentIdentity

    def outcomes(self) -> list[Any]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if e.kind == "outcome"]

    def wait_outcomes(self, count: int, within: float) -> list[Any]:
        deadline = time.monotonic() + within
        while len(outcomes := self.outcomes()) < count:
            assert time.monotonic() < deadline, f"{len(outcomes)} outcomes after {within} s, not {count}"
            time.sleep(0.05)
        return outcomes

    def request(self, body: dict[str, Any]) -> bytes:
        headers = invocation_headers(self.agent.key, self.agent.chain, body)
        raw = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}"
            f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )

    def connect(self) -> socket.socket:
        """A raw connection with a small receive window (so that the answer fills the buffers)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
        sock.settimeout(10)
        sock.connect(("127.0.0.1", self.server.port))
        return sock

    def backend_idle(self, within: float) -> bool:
        runner = self.sim._runner
        assert runner is not None
        deadline = time.monotonic() + within
        while runner.live or self.sim.engine.has_work():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


@contextlib.contextmanager
def _env(tmp_path: Path, *, time_scale: float, stall_s: float = 30.0, grace_s: int = 10) -> Iterator[Env]:
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent_key.did, model=MODEL), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    sim = SimServer(model_name=MODEL, time_scale=time_scale).start()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": sim.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(
        Gateway(gate, inventory), port=0, stream_stall_s=stall_s, shutdown_grace_s=grace_s
    ).start()
    agent = gate.issue(root, name="agent", key=agent_key, role="chat")
    try:
        yield Env(gate, server, sim, agent)
    finally:
        server.stop()
        sim.stop()
        gate.close()


def _read_head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(1)
        assert piece, "the gateway closed before answering"
        head += piece
    return head


def _held_reservations(env: Env) -> list[str]:
    rows = env.gate.store.query("SELECT state FROM budget_reservations")
    return [row[0] for row in rows if row[0] == "reserved"]


# --- pipelining ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_pipelined_stream_whose_caller_stops_reading_is_audited_as_stalled(tmp_path: Path) -> None:
    # Two streamed calls written at once on one connection; the caller reads the first answer's
    # head and then nothing. The first stream (running) is cut for the stall; its outcome says
    # so. The stall mark went to the second (queued, never run) request before.
    with _env(tmp_path, time_scale=0.02, stall_s=0.5) as env:
        sock = env.connect()
        try:
            sock.sendall(env.request(STREAM) + env.request(STREAM))
            assert _read_head(sock).startswith(b"HTTP/1.1 200")
            (outcome,) = env.wait_outcomes(1, within=20)
            assert outcome.status == "error"
            assert any(reason.startswith("caller_stalled") for reason in outcome.reasons), outcome.reasons
            assert env.backend_idle(within=5), "the backend request still runs"
        finally:
            sock.close()
        metrics = _http.get(env.server.url.removesuffix("/v1") + "/metrics", timeout=10).text
        assert "agentgate_gateway_streams_stalled_total 1.0" in metrics
        assert len(env.outcomes()) == 1  # the queued request was never decided nor run
        assert not _held_reservations(env)
        assert env.gate.verify().ok


def test_a_pipelined_json_call_whose_caller_hangs_up_stops_its_backend_request(tmp_path: Path) -> None:
    # Real time (about 100 tokens a second): the first call would run for 20 s. The caller hangs
    # up once the backend has it; the running call is told at once (its backend request is
    # cancelled, its outcome is CallerGone). Before, only the queued request was marked.
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 2_000}
    with _env(tmp_path, time_scale=1.0) as env:
        sock = env.connect()
        try:
            sock.sendall(env.request(body) + env.request({**body, "max_tokens": 10}))
            deadline = time.monotonic() + 5
            while not env.sim.engine.has_work():
                assert time.monotonic() < deadline, "the call never reached the backend"
                time.sleep(0.02)
        finally:
            sock.close()
        assert env.backend_idle(within=5), "the running call's backend request was not cancelled"
        (outcome,) = env.wait_outcomes(1, within=5)
        assert outcome.status == "error"
        assert any("CallerGone" in reason or "went away" in reason for reason in outcome.reasons), (
            outcome.reasons
        )
        assert not _held_reservations(env)


def test_pipelined_calls_are_all_answered_in_order(tmp_path: Path) -> None:
    # The bookkeeping of the request that runs follows uvicorn's queue: three calls written at
    # once are answered one after the other on the same connection, each audited.
    small = {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 3}
    with _env(tmp_path, time_scale=0.02) as env:
        sock = env.connect()
        try:
            bodies = [{**small, "max_tokens": n} for n in (3, 4, 5)]
            sock.sendall(b"".join(env.request(b) for b in bodies))
            seen = b""
            while seen.count(b"HTTP/1.1 200") < 3 or not seen.endswith(b"}"):
                piece = sock.recv(65536)
                assert piece, seen
                seen += piece
        finally:
            sock.close()
        answers = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in seen.split(b"HTTP/1.1 ")[1:]]
        assert [a["usage"]["completion_tokens"] for a in answers] == [3, 4, 5]
        assert [o.status for o in env.wait_outcomes(3, within=5)] == ["ok", "ok", "ok"]


# --- shutdown --------------------------------------------------------------------------------


@contextlib.contextmanager
def _logged(text: str) -> Iterator[threading.Event]:
    """An event set when the gateway logs a line containing ``text`` (from its server thread)."""
    seen = threading.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text in record.getMessage():
                seen.set()

    handler = Handler()
    logger = logging.getLogger("agentgate.dispatch.gateway._app")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def _stop_in_background(env: Env) -> threading.Thread:
    stopper = threading.Thread(target=env.server.stop)
    stopper.start()
    return stopper


def test_a_stream_cut_at_the_end_of_the_shutdown_grace_is_audited_gateway_stopped(tmp_path: Path) -> None:
    with _env(tmp_path, time_scale=1.0, grace_s=1) as env:
        headers = invocation_headers(env.agent.key, env.agent.chain, STREAM)
        events: list[str] = []
        with (
            _http.Client(timeout=30) as http,
            http.stream("POST", f"{env.server.url}/chat/completions", json=STREAM, headers=headers) as answer,
        ):
            assert answer.status_code == 200
            lines = answer.iter_lines()
            next(lines)
            stopper = _stop_in_background(env)
            events.extend(line for line in lines if line.startswith("data: "))
        stopper.join(30)
        assert json.loads(events[-1][6:])["error"]["code"] == "shutting_down"
        (outcome,) = env.outcomes()
        assert outcome.status == "error"
        assert "GatewayStopped" in outcome.reasons, outcome.reasons
        assert not _held_reservations(env)


def test_a_stream_cut_before_its_first_token_at_shutdown_is_answered_503_and_audited(
    tmp_path: Path,
) -> None:
    # A very slow backend (a thousand times slower than real time): the first token would come
    # long after the shutdown grace. The call is answered 503 shutting_down, not cut.
    with _env(tmp_path, time_scale=1000.0, grace_s=1) as env:
        headers = invocation_headers(env.agent.key, env.agent.chain, STREAM)
        answers: list[httpx.Response] = []
        caller = threading.Thread(
            target=lambda: answers.append(
                _http.post(f"{env.server.url}/chat/completions", json=STREAM, headers=headers, timeout=30)
            )
        )
        caller.start()
        deadline = time.monotonic() + 5
        while not env.sim.engine.has_work():
            assert time.monotonic() < deadline, "the call never reached the backend"
            time.sleep(0.02)
        _stop_in_background(env).join(30)
        caller.join(30)
        (answer,) = answers
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "shutting_down"
        (outcome,) = env.outcomes()
        assert outcome.status == "error"
        assert "GatewayStopped" in outcome.reasons, outcome.reasons
        assert not _held_reservations(env)


@pytest.mark.slow
def test_a_lagging_caller_gets_the_last_event_of_a_stream_cut_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller lags behind a fast stream by more than the socket buffers (it reads nothing,
    # and the gateway's buffer is past its high-water mark; the stall limit is long). The
    # gateway stops; when its grace is over the stream is cut, and the caller, reading from then
    # on slowly (at most 40 KB/s: 1.2 s before the gateway's 64 KiB buffer is down to 16 KiB and
    # takes the event, 0.4 s more until it has all left), still gets the shutting_down event
    # and the stream's end: the gateway waits for its buffer to drain (LAST_EVENT_S, 3 s).
    # Before, the event waited 1 s at most for room in the buffer and was dropped, and the
    # connection was left neither ended nor closed. The wait is made 8 s here: the caller's
    # 2.5 s of slow reading still outlasts the old 1 s by far, and a loaded machine (the reading
    # thread starved, its sleeps longer) no longer drains the buffer past the limit (it failed
    # so once, in a run beside other work).
    monkeypatch.setattr(gateway_stream, "LAST_EVENT_S", 8.0)
    with _env(tmp_path, time_scale=0.002, grace_s=1) as env:
        sock = env.connect()
        try:
            sock.sendall(env.request(STREAM))
            assert _read_head(sock).startswith(b"HTTP/1.1 200")
            (connection,) = env.server.server.server_state.connections
            # The gateway side's kernel buffer fixed small (the kernel would grow it to MiBs as
            # the stream goes on, and take the last event there): the gateway's own buffer stays
            # full while the caller reads nothing.
            server_side = connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            server_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
            deadline = time.monotonic() + 20
            while not connection.flow.write_paused:  # type: ignore[attr-defined]
                assert time.monotonic() < deadline, "the gateway's buffer never filled"
                time.sleep(0.05)
            with _logged("a stream was cut") as cut:
                stopper = _stop_in_background(env)
                assert cut.wait(10), "the stream was not cut at the end of the grace"
            received = bytearray()
            slow_until = time.monotonic() + 2.5
            try:
                with contextlib.suppress(ConnectionResetError):
                    while piece := sock.recv(2048 if time.monotonic() < slow_until else 1 << 20):
                        received += piece
                        if time.monotonic() < slow_until:
                            time.sleep(0.05)  # at most 40 KB/s
            except TimeoutError:
                pytest.fail("the gateway neither ended the stream nor closed the connection")
            stopper.join(30)
        finally:
            sock.close()
        # The answer is chunked: its last event, then the chunked encoding's end.
        tail = bytes(received[-2048:])
        assert tail.endswith(b"\r\n0\r\n\r\n"), tail[-300:]
        assert b'"code": "shutting_down"' in tail.rsplit(b"data: ", 1)[-1], tail[-300:]
