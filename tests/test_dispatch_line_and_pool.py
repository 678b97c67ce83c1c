"""The router's line for slots, the dispatcher's wake-up, the gateway's pipelining
and shutdown and the durable SQLite set-up: each test here failed on the code it was written
against and names what was wrong.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_gateway_shutdown_pipelining import MODEL as GATEWAY_MODEL
from test_gateway_shutdown_pipelining import STREAM, _env, _held_reservations, _read_head
from test_router_order import MODEL, req

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch import router as router_module
from agentgate.dispatch.gateway._stream import LAST_EVENT_S
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router
from agentgate.errors import StoreError
from agentgate.store._sqlite import DURABLE_WAL_PAGES, SQLiteStore


def two_engines() -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": "a", "url": "http://127.0.0.1:9000", "models": [MODEL], "max_concurrency": 1},
                {"name": "b", "url": "http://127.0.0.1:9001", "models": [MODEL], "max_concurrency": 1},
            ]
        }
    )


def test_a_freed_slot_costs_work_linear_in_the_line_not_quadratic() -> None:
    # Every waiter asks again when a slot frees (the dispatcher wakes them all). Each ask swept
    # and sorted the whole line: with 1,000 waiters one freed slot cost 0.8 s of the event loop
    # (N asks of N steps). The walk now stops once the free slots are spoken for. The work is
    # counted as the lines of router.py executed (a tracer), the same on any machine.
    n = 300
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "b0", "url": "http://127.0.0.1:9000", "models": [MODEL], "max_concurrency": 1}
            ]
        }
    )
    router = Router(inventory)
    assert router.route(req("busy", 1, 0.0), 0.0).action == "dispatch"
    waiters = [req(f"w{i}", 1, 0.001 * i / n) for i in range(n)]
    for w in waiters:
        assert router.route(w, 0.001).action == "wait"
    router.finished("busy", 0.002)
    lines = [0]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename == router_module.__file__:
            if event == "line":
                lines[0] += 1
            return tracer
        return None

    served = []
    sys.settrace(tracer)
    try:
        for w in reversed(waiters):  # the worst order: the last in line asks first
            if router.route(w, 0.003).action == "dispatch":
                served.append(w.id)
    finally:
        sys.settrace(None)
    assert served == ["w0"]
    assert lines[0] <= 200 * n, lines[0]  # about 95 a waiter; 1,838 a waiter before (n = 300)


def test_a_waiter_that_may_use_either_engine_does_not_block_one_that_may_use_only_one() -> None:
    # "first" (class 0, may use a or b) is ahead of "only-a" (may use a only). Both engines free
    # up: first fit gave "a" to "first" and told "only-a" to wait, though "first" could take "b".
    router = Router(two_engines())
    assert router.route(req("x", 1, 0.0), 0.0).backend in ("a", "b")
    assert router.route(req("y", 1, 0.0), 0.0).backend in ("a", "b")
    assert router.route(req("first", 0, 0.1), 0.1).action == "wait"
    only_a = lambda backend: backend.name == "a"  # noqa: E731
    assert router.route(req("only-a", 1, 0.2), 0.2, only_a).action == "wait"
    router.finished("x", 0.3)
    router.finished("y", 0.3)
    assert router.route(req("only-a", 1, 0.2), 0.31, only_a).backend == "a"
    # ... and "first" still gets the other slot.
    assert router.route(req("first", 0, 0.1), 0.32).backend == "b"


def test_a_withdrawn_waiter_leaves_the_line_at_once() -> None:
    # A waiter whose caller gave up (its task cancelled while it waited) held its place, and the
    # slots freed for it, for WAITER_TIMEOUT_S (1 s) before those behind it could have them.
    # ``withdraw`` takes it out at once (the dispatcher calls it when a waiting call ends).
    router = Router(two_engines())
    only_a = lambda backend: backend.name == "a"  # noqa: E731
    assert router.route(req("x", 1, 0.0), 0.0, only_a).backend == "a"
    assert router.route(req("gone", 0, 0.1), 0.1, only_a).action == "wait"
    assert router.route(req("next", 1, 0.2), 0.2, only_a).action == "wait"
    router.finished("x", 0.3)
    assert router.route(req("next", 1, 0.2), 0.31, only_a).action == "wait"
    router.withdraw("gone")
    router.withdraw("never-waited")  # unknown ids are ignored
    assert router.route(req("next", 1, 0.2), 0.32, only_a).backend == "a"


def test_a_connection_made_outside_the_pool_takes_its_synchronous_mode_in_any_case(tmp_path: Path) -> None:
    # SQLiteStore.connect passed its mode to the PRAGMA as given: "full" synced every commit but
    # kept SQLite's 1000-page checkpoint (the durable threshold was matched upper-case only), and
    # a mode SQLite does not know ("bogus", "fll") was taken for NORMAL, silently not durable.
    store = SQLiteStore(tmp_path / "s.db", synchronous="FULL")
    try:
        conn = store.connect("full")
        try:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == DURABLE_WAL_PAGES
        finally:
            conn.close()
        with pytest.raises(StoreError, match="synchronous must be one of"):
            store.connect("fll")
    finally:
        store.close()


# --- the gateway: a bad request pipelined behind a good one ---------------------------------


def _answers(sock: socket.socket) -> bytes:
    """Everything the gateway writes on ``sock`` until it closes the connection."""
    seen = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while piece := sock.recv(65536):
            seen += piece
    return seen


@pytest.mark.parametrize(
    ("bad", "status"),
    [
        (b"GARBAGE / HTTP/1.1\r\n\r\n", b"400"),  # uvicorn's parser refuses it
        (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),  # over MAX_HEAD_BYTES
    ],
)
def test_a_bad_request_pipelined_behind_a_good_one_is_refused_after_its_answer(
    tmp_path: Path, bad: bytes, status: bytes
) -> None:
    # The refusal of the bad request was written to the connection at once, ahead of the
    # answer to the good call still running: the caller read "HTTP/1.1 400" (or 431) as the
    # answer to its good call, the connection was closed under it, and the call was settled as
    # CallerGone. The good call is now answered first, then the refusal, then the connection closes.
    body = {"model": GATEWAY_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 20}
    with _env(tmp_path, time_scale=1.0) as env:
        sock = env.connect()
        try:
            sock.sendall(env.request(body))
            time.sleep(0.05)  # apart: a head that comes in the good call's read is not counted
            sock.sendall(bad)
            seen = _answers(sock)
        finally:
            sock.close()
        assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
        head, rest = seen.split(b"\r\n\r\n", 1)
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(
                b":"
            )[1]
        )
        answer = json.loads(rest[:length])
        assert answer["usage"]["completion_tokens"] == 20
        assert rest[length:].startswith(b"HTTP/1.1 " + status), rest[length:][:100]
        (outcome,) = env.wait_outcomes(1, within=5)
        assert outcome.status == "ok", outcome.reasons
        assert not _held_reservations(env)


@pytest.mark.slow
def test_stopping_with_many_lagging_streams_is_bounded_once_not_per_stream(tmp_path: Path) -> None:
    # Four streams whose callers lag (three read nothing, one reads a byte a second): each cut
    # stream waits up to LAST_EVENT_S for its last event to leave the buffer. The waits run side
    # by side, so stopping takes the grace plus LAST_EVENT_S once (about 4 s), not 3 s a
    # stream, and a trickling reader does not hold the process past it. The lagging connections
    # were left open past the server's end (the loop closed with their transports: under
    # warnings as errors the server thread then outlived stop(), 11 s); they are reset now.
    with _env(tmp_path, time_scale=0.002, grace_s=1) as env:
        socks = [env.connect() for _ in range(4)]
        trickle_stop = threading.Event()

        def trickle(sock: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while not trickle_stop.is_set() and sock.recv(1):
                    time.sleep(1.0)

        try:
            for sock in socks:
                sock.sendall(env.request({**STREAM, "max_tokens": 20_000}))  # four fit the backend's KV
                assert _read_head(sock).startswith(b"HTTP/1.1 200")
            for connection in env.server.server.server_state.connections:
                server_side = connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
                server_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
            reader = threading.Thread(target=trickle, args=(socks[0],), daemon=True)
            reader.start()
            deadline = time.monotonic() + 20
            while not all(c.flow.write_paused for c in env.server.server.server_state.connections):  # type: ignore[attr-defined]
                assert time.monotonic() < deadline, "the gateway's buffers never filled"
                time.sleep(0.05)
            thread = env.server._thread
            started = time.monotonic()
            env.server.stop()
            took = time.monotonic() - started
        finally:
            trickle_stop.set()
            for sock in socks:
                sock.close()
        # Waits one after another (4 x LAST_EVENT_S) outlast stop's join (the grace + 10 s): the
        # server thread is still alive then. Side by side, the grace plus one wait, and the rest of
        # the stop (a loaded machine's seconds) stays well under two waits more.
        assert thread is not None and not thread.is_alive()
        assert took < 1 + 3 * LAST_EVENT_S, took
        assert not env.server.server.server_state.connections  # each reset, none left open
        outcomes = env.outcomes()
        assert len(outcomes) == 4
        assert all("GatewayStopped" in o.reasons for o in outcomes), [o.reasons for o in outcomes]
        assert not _held_reservations(env)


def test_a_waiter_whose_arrival_is_no_number_does_not_disorder_the_line() -> None:
    # The line is kept sorted and a waiter is found in it by bisection: a NaN arrival (a
    # RouteRequest built by hand) broke the order, and withdrawing that waiter removed the first
    # in line instead (which then held no place, and whose own withdrawal removed another).
    router = Router(two_engines())
    only_a = lambda backend: backend.name == "a"  # noqa: E731
    assert router.route(req("busy", 1, 0.0), 0.0, only_a).backend == "a"
    assert router.route(req("first", 1, 0.1), 0.1, only_a).action == "wait"
    assert router.route(req("nan", 1, math.nan), 0.2, only_a).action == "wait"
    router.withdraw("nan")
    router.finished("busy", 0.3)
    # "first" still holds its place: a later class-1 request does not take its slot.
    assert router.route(req("later", 1, 0.25), 0.3, only_a).action == "wait"
    assert router.route(req("first", 1, 0.1), 0.31, only_a).backend == "a"


def test_stopping_with_requests_pipelined_behind_a_stream_decides_only_the_running_one(
    tmp_path: Path,
) -> None:
    # A stream runs with a JSON call and another stream pipelined behind it when the gateway
    # stops: the running stream is cut (GatewayStopped, its last event sent), the queued ones
    # are never decided, sent or audited, and no reservation is left held.
    small = {"model": GATEWAY_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 5}
    with _env(tmp_path, time_scale=1.0, grace_s=1) as env:
        sock = env.connect()
        try:
            sock.sendall(
                env.request({**STREAM, "max_tokens": 5_000}) + env.request(small) + env.request(STREAM)
            )
            assert _read_head(sock).startswith(b"HTTP/1.1 200")
            stopper = threading.Thread(target=env.server.stop)
            stopper.start()
            seen = _answers(sock)
            stopper.join(30)
        finally:
            sock.close()
        assert b'"code": "shutting_down"' in seen
        # The cut stream's end closes the connection: no answer follows it (until review R76 the
        # JSON call queued behind was started, answered 503, and on a loaded machine decided).
        assert seen.count(b"HTTP/1.1 ") == 0, seen.count(b"HTTP/1.1 ")
        env.gate.flush()
        kinds = [e.kind for e in env.gate.audit.entries()]
        assert kinds.count("outcome") == 1, kinds
        (outcome,) = env.outcomes()
        assert "GatewayStopped" in outcome.reasons, outcome.reasons
        assert not _held_reservations(env)
        assert env.gate.verify().ok


def test_a_caller_that_closes_half_way_through_pipelined_calls_leaves_only_the_running_one(
    tmp_path: Path,
) -> None:
    # Three calls pipelined, the first streamed; the caller reads some of the stream and closes.
    # The running stream is settled once (CallerGone), the queued two are never decided, and no
    # reservation is left held.
    small = {"model": GATEWAY_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 5}
    with _env(tmp_path, time_scale=1.0) as env:
        sock = env.connect()
        try:
            sock.sendall(
                env.request({**STREAM, "max_tokens": 5_000}) + env.request(small) + env.request(small)
            )
            assert _read_head(sock).startswith(b"HTTP/1.1 200")
            got = b""
            while got.count(b"data: ") < 3:
                got += sock.recv(4096)
        finally:
            sock.close()
        (outcome,) = env.wait_outcomes(1, within=10)
        assert outcome.status == "error"
        assert any("CallerGone" in reason for reason in outcome.reasons), outcome.reasons
        assert env.backend_idle(within=5)
        time.sleep(0.3)  # the queued calls would have been decided by now
        assert len(env.outcomes()) == 1
        assert not _held_reservations(env)
        assert env.gate.verify().ok


def test_a_connection_is_reused_after_a_refused_call_and_decides_the_next_once(tmp_path: Path) -> None:
    # Keep-alive after an answer that was not a success: a call with a body that is not JSON
    # (400, nothing decided) then a good call on the same connection, written at once: the good
    # one is answered 200 and decided and settled once.
    small = {"model": GATEWAY_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 5}
    with _env(tmp_path, time_scale=0.02) as env:
        bad = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nnot {"
        sock = env.connect()
        try:
            sock.sendall(bad + env.request(small))
            seen = b""
            while seen.count(b"HTTP/1.1 ") < 2 or not seen.endswith(b"}"):
                piece = sock.recv(65536)
                assert piece, seen
                seen += piece
        finally:
            sock.close()
        statuses = [part[:3] for part in seen.split(b"HTTP/1.1 ")[1:]]
        assert statuses == [b"400", b"200"], seen[:300]
        (outcome,) = env.wait_outcomes(1, within=5)
        assert outcome.status == "ok"
        env.gate.flush()
        assert [e.kind for e in env.gate.audit.entries()].count("outcome") == 1
        assert not _held_reservations(env)


def test_due_names_the_waiters_the_free_slots_go_to() -> None:
    # For a dispatcher that wakes only the waiters a freed slot goes to (instead of every waiter,
    # each asking again: N route() calls per freed slot). A waiter ahead that may not use the
    # free engine is passed over; one that stopped asking too.
    router = Router(two_engines())
    only_a = lambda backend: backend.name == "a"  # noqa: E731
    only_b = lambda backend: backend.name == "b"  # noqa: E731
    assert router.route(req("x", 1, 0.0), 0.0, only_a).backend == "a"
    assert router.route(req("y", 1, 0.0), 0.0, only_b).backend == "b"
    assert router.due(0.05) == []  # nothing free
    assert router.route(req("gone", 0, 0.05), 0.05, only_b).action == "wait"
    assert router.route(req("wants-b", 0, 0.1), 0.1, only_b).action == "wait"
    assert router.route(req("wants-a", 1, 0.2), 0.2, only_a).action == "wait"
    assert router.route(req("any", 1, 0.3), 0.3).action == "wait"
    router.finished("x", 0.4)
    assert router.due(0.4) == ["wants-a"]
    router.withdraw("gone")
    router.finished("y", 0.5)
    assert sorted(router.due(0.5)) == ["wants-a", "wants-b"]
