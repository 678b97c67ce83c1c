"""Resource leaks over a long life: what a service that runs agentgate for weeks keeps
of each open/close cycle, each decision and each failure.

Each check compares N cycles (or decisions) with 2N, so that a constant cost (a cache filling up,
a thread pool started once) is told from one that grows with every cycle.

What holds:
- open/close cycles of a ``Gate`` on SQLite (issue, a decision, ``run`` through the sync scheduler,
  ``arun`` through an event loop's scheduler, close) and of a ``Gate`` on PostgreSQL leave no file
  descriptor, thread or PostgreSQL backend behind, and every closed gate is collected;
- start/stop cycles of the HTTP gateway (``GatewayServer`` over a ``GatewayGate``, one answered
  chat call each) leave no descriptor or thread behind;
- many decisions with distinct call ids and arguments (once-only tool calls that run, refusals,
  model calls that reserve and settle a budget) hold no memory once the caches are warm: the
  second half of the run allocates nothing that stays;
- the WAL of a durable SQLite store stays near its checkpoint threshold however many decisions
  are written;
- a tool that raises (an ``Exception`` or a ``KeyboardInterrupt``) under a concurrency limit of 1
  gives its slot back and leaves no SQLite write lock: the next call runs, another connection
  writes;
- ``quota_usage`` stays bounded (old windows are pruned).

Fixed by the lead in review r38 (plain tests now): ``Gate.open`` did not close the store it
opened when the gate could not be made (a log key too widely readable: the SQLite connections, or
the PostgreSQL pool with its threads, stayed open while anything held the exception); every
``Gate`` ever made kept one atexit slot (now one registration for all open gates); a model call
whose ``spent`` reported a usage that cannot be printed (an integer past Python's 4,300-digit
limit) poisoned the gate (every later decision raised a bare ``ValueError``, the outcome thread
died, the outcome was lost with its reservation held).

Fixed by the lead in review r38: four tables grew by one row (or more) per call for ever and
docs/operations.md said nothing of purging them: ``budget_reservations`` (every settled
reservation), ``agentgate_once`` (every once-only call that ran), ``approvals`` with
``approval_asked`` and ``approval_grants`` (every approval request, also long expired) and
``agentgate_dead_letters`` (every call given up). ``agentgate store prune --older-than D`` now
deletes the settled, expired and old rows of three of them, and docs/operations.md ("Growth and
pruning") says when ``agentgate_once`` rows may be deleted by hand
(tests/test_store_prune_and_triggers.py tests the command).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import re
import sqlite3
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import _http
import pytest
from _raw_sqlite import query

from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.errors import AgentGateError, KeyFileError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore, Store
from agentgate.store._sqlite import DURABLE_WAL_PAGES

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ROOT / "docs" / "operations.md"
MODEL = "llama-3.1-8b"

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    concurrency: 1
  flaky: {{}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
  {model}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
      - resource: tool:flaky
      - resource: model:small
      - resource: model:{model}
    budget: {{limit: 1000000000000, unit: usd_micros}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 3600
quotas:
  refunds: {{principal: agent, window_s: 3600, limit: 1000000000, resources: [tool:refund]}}
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
    expiry_s: {expiry}
"""


class World:
    """One policy and its keys; gates over stores the test names."""

    def __init__(self, *, expiry_s: int = 3600) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
        text = POLICY.format(model=MODEL, expiry=expiry_s, **{n: k.did for n, k in self.keys.items()})
        self.policy = parse_policy(text, source="leaks.yaml")

    def gate(self, store: Store, cls: type[Gate] = Gate) -> Gate:
        return cls(self.policy, store)

    def agent(self, gate: Gate) -> AgentIdentity:
        return gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fds_on(path: Path) -> int:
    """Descriptors of this process open on ``path`` (the database file itself)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:  # closed while listed (the listing's own descriptor)
            pass
    return count


def _settled(measure: Callable[[], tuple[int, ...]]) -> tuple[int, ...]:
    """``measure()`` once collected garbage and ending threads have let go (at most 5 s)."""
    deadline = time.monotonic() + 5.0
    last = None
    while True:
        gc.collect()
        now = measure()
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.05)


def _grows(
    measure: Callable[[], tuple[int, ...]], cycle: Callable[[int], None], n: int
) -> list[tuple[int, ...]]:
    """``measure`` after one warm-up cycle, after ``n`` more and after ``2n``."""
    cycle(-1)
    seen = [_settled(measure)]
    for i in range(n):
        cycle(i)
    seen.append(_settled(measure))
    for i in range(n, 2 * n):
        cycle(i)
    seen.append(_settled(measure))
    return seen


def _assert_flat(seen: list[tuple[int, ...]], names: tuple[str, ...], slack: int = 1) -> None:
    base, first, second = seen
    for k, name in enumerate(names):
        assert first[k] - base[k] <= slack and second[k] - first[k] <= slack, (
            f"{name} grew with the cycles: {base[k]} after the warm-up, {first[k]} after N, {second[k]} after 2N"
        )


# --- open/close cycles ------------------------------------------------------------------------


def test_gate_cycles_on_sqlite_leave_no_descriptor_thread_or_gate_behind(tmp_path: Path) -> None:
    world = World()
    gates: list[weakref.ref[Gate]] = []

    def cycle(i: int) -> None:
        gate = world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"))
        gates.append(weakref.ref(gate))
        agent = world.agent(gate)
        gate.run(gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id=f"c{i}"), lambda: 1)

        async def in_a_loop() -> None:
            async def tool() -> int:
                return 2

            await gate.arun(gate.authorize(agent, Call.tool("lookup", {"id": str(i)})), tool)

        asyncio.run(in_a_loop())
        gate.close()

    seen = _grows(lambda: (_fds(), threading.active_count()), cycle, 12)
    _assert_flat(seen, ("file descriptors", "threads"))
    gc.collect()
    assert [ref for ref in gates if ref() is not None] == [], "a closed gate was never collected"


def test_gate_cycles_keep_no_atexit_registration_per_gate(tmp_path: Path) -> None:
    slots = getattr(atexit, "_ncallbacks", None)
    if slots is None:
        pytest.skip("this Python does not count atexit registrations")
    world = World()

    def cycle(i: int) -> None:
        world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL")).close()

    seen = _grows(lambda: (slots(),), cycle, 20)
    _assert_flat(seen, ("atexit registrations",))


@pytest.mark.postgres
def test_gate_cycles_on_postgresql_leave_no_backend_descriptor_or_thread_behind(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from agentgate.store._postgres import PostgresStore

    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    world = World()
    with psycopg.connect(postgres_url, autocommit=True) as monitor:

        def measure() -> tuple[int, int, int]:
            row = monitor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()
            assert row is not None
            return int(row[0]), _fds(), threading.active_count()

        def cycle(i: int) -> None:
            gate = world.gate(PostgresStore(postgres_url))
            agent = world.agent(gate)
            gate.run(gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id=f"c{i}"), lambda: 1)
            gate.close()

        seen = _grows(measure, cycle, 6)
    _assert_flat(seen, ("PostgreSQL backends", "file descriptors", "threads"))


@pytest.fixture(scope="module")
def backend() -> Iterator[SimServer]:
    server = SimServer(model_name=MODEL, time_scale=0.01).start()
    yield server
    server.stop()


def test_gateway_server_cycles_leave_no_descriptor_or_thread_behind(
    tmp_path: Path, backend: SimServer
) -> None:
    world = World()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    def cycle(i: int) -> None:
        gate = world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"), GatewayGate)
        assert isinstance(gate, GatewayGate)
        server = GatewayServer(Gateway(gate, inventory), port=0).start()
        try:
            agent = world.agent(gate)
            headers = {"content-type": "application/json", **invocation_headers(agent.key, agent.chain, body)}
            with _http.Client() as client:
                answer = client.post(
                    f"{server.url}/chat/completions", content=json.dumps(body), headers=headers
                )
            assert answer.status_code == 200, answer.text
        finally:
            server.stop()
            gate.close()

    seen = _grows(lambda: (_fds(), threading.active_count()), cycle, 4)
    _assert_flat(seen, ("file descriptors", "threads"))


# --- failures that leave something open ---------------------------------------------------------


def _stores_held_by(exc: BaseException) -> list[Store]:
    """The stores the frames of ``exc``'s traceback still hold (what a kept exception keeps open)."""
    found: list[Store] = []
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, Store) and all(value is not s for s in found):
                found.append(value)
        tb = tb.tb_next
    return found


def _failing_open(tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A policy file, and a log key that ``Gate.open`` refuses (group and others may read it)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\n")
    key = tmp_path / "keys" / "log.key"
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(key))
    Gate.open(policy, store).close()  # creates the key (and the tables)
    key.chmod(0o644)
    return policy


def test_gate_open_that_fails_closes_the_sqlite_store_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store" / "agentgate.db"
    policy = _failing_open(tmp_path, str(db), monkeypatch)
    gc.collect()
    assert _fds_on(db) == 0
    kept: list[AgentGateError] = []
    for _ in range(3):  # a service that retries, and logs each failure
        with pytest.raises(KeyFileError) as failed:
            Gate.open(policy, str(db))
        kept.append(failed.value)
    gc.collect()
    left_open = _fds_on(db)
    for exc in kept:  # close what the product left open, so nothing outlives the test
        for store in _stores_held_by(exc):
            store.close()
    assert left_open == 0, f"{left_open} descriptors on {db.name} stay open after 3 failed Gate.open"


@pytest.mark.postgres
def test_gate_open_that_fails_closes_the_postgresql_pool_it_opened(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    policy = _failing_open(tmp_path, postgres_url, monkeypatch)
    with psycopg.connect(postgres_url, autocommit=True) as monitor:

        def backends() -> int:
            row = monitor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()
            assert row is not None
            return int(row[0])

        before, threads = _settled(lambda: (backends(), threading.active_count()))
        with pytest.raises(KeyFileError) as failed:
            Gate.open(policy, postgres_url)
        after, threads_after = _settled(lambda: (backends(), threading.active_count()))
        for store in _stores_held_by(failed.value):
            store.close()
    assert (after, threads_after) == (before, threads), (
        f"a failed Gate.open left {after - before} PostgreSQL connections and "
        f"{threads_after - threads} threads open"
    )


def test_a_tool_that_raises_gives_back_its_slot_and_leaves_no_write_lock(tmp_path: Path) -> None:
    """``refund`` runs one at a time (``concurrency: 1``): a slot that an exception kept would
    make the next call wait for ever; a transaction left open would keep SQLite's write lock."""
    world = World()
    db = tmp_path / "agentgate.db"
    gate = world.gate(SQLiteStore(db, synchronous="NORMAL"))
    try:
        agent = world.agent(gate)

        def interrupted() -> None:
            raise KeyboardInterrupt

        def failing() -> None:
            raise RuntimeError("the tool broke")

        for i, (tool, kind) in enumerate(((interrupted, KeyboardInterrupt), (failing, RuntimeError))):
            auth = gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id=f"raise-{i}")
            with pytest.raises(kind):
                gate.run(auth, tool)
        ran: list[object] = []

        def next_call() -> None:
            auth = gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id="after")
            ran.append(gate.run(auth, lambda: "ran"))

        caller = threading.Thread(target=next_call, daemon=True)
        caller.start()
        caller.join(10.0)
        assert not caller.is_alive(), "the call after a failed one never got the tool's only slot"
        assert ran == ["ran"]
        gate.flush()
        other = sqlite3.connect(db, timeout=1.0)
        try:
            other.execute("BEGIN IMMEDIATE")  # raises 'database is locked' if a write lock was left
            other.execute("ROLLBACK")
        finally:
            other.close()
    finally:
        gate.close()


def test_a_usage_that_cannot_be_printed_does_not_poison_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    died: list[str] = []
    monkeypatch.setattr(
        threading, "excepthook", lambda args: died.append(args.thread.name if args.thread else "?")
    )
    world = World()
    gate = world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"))
    try:
        agent = world.agent(gate)
        call = Call("model:small", "generate", {"max_tokens": 10})
        auth = gate.authorize(agent, call, tokens=(10, 10))
        assert auth.allowed
        gate.run(auth, lambda: "answer", spent=lambda _: (10**5000, -1))  # a backend's garbage usage
        answers: list[object] = []
        for i in range(3):
            try:
                answers.append(gate.authorize(agent, Call.tool("lookup", {"id": str(i)})).verdict)
            except Exception as exc:  # what every later caller got: a bare ValueError
                answers.append(type(exc).__name__)
        time.sleep(0.1)  # the background thread's ticks (every 10 ms) have come and gone
        outcomes_thread = any(t.name == "agentgate-outcomes" and t.is_alive() for t in threading.enumerate())
        gate.flush()
        outcome = [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
        held = gate.ledger.usage(agent.grant_id)[1]
    finally:
        gate.close()
    assert answers == ["allow"] * 3, answers
    assert outcomes_thread and not died, f"the outcome thread died: {died}"
    assert len(outcome) == 1 and held == 0, "the call's outcome was lost and its reservation stays held"


# --- many decisions ------------------------------------------------------------------------------


def test_many_decisions_with_distinct_values_hold_no_memory_once_warm(tmp_path: Path) -> None:
    """Once-only tool calls that run, refusals and model calls that reserve and settle, each with
    its own call id and arguments: the second half of the run keeps nothing the first did not."""
    world = World()
    gate = world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"))
    try:
        agent = world.agent(gate)

        def decide(i: int) -> None:
            refund = gate.authorize(
                agent, Call.tool("refund", {"amount": i % 100}), call_id=f"r{i}", run_id="run"
            )
            gate.run(refund, lambda: "ok", call_id=f"r{i}", run_id="run")
            gate.authorize(agent, Call.tool("nowhere", {"x": str(i)}), call_id=f"d{i}")  # refused
            model = gate.authorize(
                agent, Call("model:small", "generate", {"max_tokens": 8 + i % 5}), tokens=(i % 50, 8)
            )
            gate.run(model, lambda: "text", spent=lambda _: (i % 50, 4))

        n = 300
        for i in range(-100, 0):
            decide(i)
        gate.flush()
        gc.collect()
        tracemalloc.start()
        try:
            first = tracemalloc.take_snapshot()
            for i in range(n):
                decide(i)
            gate.flush()
            gc.collect()
            middle = tracemalloc.take_snapshot()
            for i in range(n, 2 * n):
                decide(i)
            gate.flush()
            gc.collect()
            last = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        grew_first = sum(s.size_diff for s in middle.compare_to(first, "filename"))
        grew_second = sum(s.size_diff for s in last.compare_to(middle, "filename"))
        # No line keeps an object per decision (3 decisions per step), however small, and the
        # whole half keeps less than 16 bytes per decision.
        kept = [s for s in last.compare_to(middle, "lineno") if s.count_diff >= n // 2]
        assert not kept, f"objects kept per decision once warm: {'; '.join(map(str, kept[:3]))}"
        assert grew_second < 16 * 3 * n, (
            f"{grew_second} bytes kept by {3 * n} decisions once warm ({grew_first} in the half before): "
            + "; ".join(str(s) for s in last.compare_to(middle, "lineno")[:3])
        )
        assert len(gate.ledger._held) == 0 and len(gate._open_requests) == 0
    finally:
        gate.close()


def test_the_wal_of_a_durable_store_stays_near_its_checkpoint_threshold(tmp_path: Path) -> None:
    world = World()
    db = tmp_path / "agentgate.db"
    gate = world.gate(SQLiteStore(db, synchronous="FULL"))
    wal = Path(f"{db}-wal")
    try:
        agent = world.agent(gate)
        sizes = []
        for round_ in range(3):
            for i in range(120):
                auth = gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id=f"{round_}-{i}")
                gate.run(auth, lambda: 1)
            gate.flush()
            sizes.append(wal.stat().st_size)
        page = int(query(db, "PRAGMA page_size")[0][0])
    finally:
        gate.close()
    # The threshold plus the transaction that crossed it (a few pages), whatever was written.
    assert max(sizes) <= (DURABLE_WAL_PAGES + 64) * (page + 24) + 32, sizes
    assert sizes[2] - sizes[1] <= 16 * (page + 24), f"the WAL grew with the decisions: {sizes}"


# --- tables that grow per call --------------------------------------------------------------------


def _documented_purge(table: str) -> bool:
    """Whether docs/operations.md names ``table`` in a paragraph that says how its rows go."""
    for paragraph in re.split(r"\n\s*\n", OPERATIONS.read_text()):
        if re.search(rf"\b{table}\b", paragraph) and re.search(
            r"DELETE FROM|\bpurg|\bprun|retention|deleted", paragraph, re.I
        ):
            return True
    return False


def _once_calls(gate: Gate, agent: AgentIdentity, i: int) -> None:
    auth = gate.authorize(agent, Call.tool("refund", {"amount": 1}), call_id=f"once-{i}", run_id="run")
    gate.run(auth, lambda: "refunded")


def _model_calls(gate: Gate, agent: AgentIdentity, i: int) -> None:
    auth = gate.authorize(agent, Call("model:small", "generate", {"max_tokens": 8}), tokens=(10, 8))
    gate.run(auth, lambda: "text", spent=lambda _: (10, 3))


def _approval_requests(gate: Gate, agent: AgentIdentity, i: int) -> None:
    auth = gate.authorize(agent, Call.tool("refund", {"amount": 500}), call_id=f"ask-{i}")
    assert auth.needs_approval  # asked, never answered: it expires (after 1 s here)


def _failed_calls(gate: Gate, agent: AgentIdentity, i: int) -> None:
    def broken() -> None:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):
        gate.run(gate.authorize(agent, Call.tool("flaky", {}), call_id=f"fail-{i}"), broken)


@pytest.mark.parametrize(
    ("table", "calls", "pause_s"),
    [
        pytest.param("quota_usage", _once_calls, 0.0, id="quota_usage"),
        pytest.param(
            "budget_reservations",
            _model_calls,
            0.0,
            id="budget_reservations",
        ),
        pytest.param(
            "agentgate_once",
            _once_calls,
            0.0,
            id="agentgate_once",
        ),
        pytest.param(
            "approvals",
            _approval_requests,
            1.1,
            id="approvals",
        ),
        pytest.param(
            "agentgate_dead_letters",
            _failed_calls,
            0.0,
            id="agentgate_dead_letters",
        ),
    ],
)
def test_a_table_that_grows_per_call_is_bounded_or_has_a_documented_purge(
    tmp_path: Path, table: str, calls: Callable[[Gate, AgentIdentity, int], None], pause_s: float
) -> None:
    """N calls, then (after ``pause_s``: the first N approval requests have expired) N more: a
    table whose rows double holds one per call for ever, unless the operator is told how to purge it."""
    world = World(expiry_s=1)
    gate = world.gate(SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"))
    n = 15
    try:
        agent = world.agent(gate)

        def rows() -> int:
            gate.flush()
            return int(gate.store.query(f"SELECT count(*) FROM {table}")[0][0])

        for i in range(n):
            calls(gate, agent, i)
        first = rows()
        time.sleep(pause_s)
        for i in range(n, 2 * n):
            calls(gate, agent, i)
        second = rows()
    finally:
        gate.close()
    grows = second - first >= n
    assert not grows or _documented_purge(table), (
        f"{table}: {first} rows after {n} calls, {second} after {2 * n}, and docs/operations.md "
        "says nothing of how its rows are purged"
    )
