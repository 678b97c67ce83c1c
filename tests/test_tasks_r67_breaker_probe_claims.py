"""Review R67: ``half_open_max_calls`` is a bound across every process sharing a store.

Each process used to work out half-open alone: two schedulers on one store file (each of its own
limits, as two processes are), ``half_open_max_calls=1``, ran one probe each at the same time. A
probe now holds a claim in the store (a lease slot of ``probe:<breaker key>``, renewed while it
runs, expiring when its holder dies), taken in the transaction that reads the breaker's row.

Real stores (a SQLite file, a PostgreSQL server), real schedulers, a real second process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import CircuitOpen
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.leases import LeaseManager, SharedBreakers
from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

KEY = "tool:t"
PROBE_KEY = "probe:" + KEY  # the claims' lease key (SharedBreakers.probe_key)
WAIT_S = 20.0  # bound on every wait: only a bug comes near it


def _config(reset_s: float = 2.0, ttl_s: float = 30.0) -> SchedulerConfig:
    return SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=reset_s, half_open_max_calls=1),
        lease_ttl_s=ttl_s,
    )


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One store, named as every process opens it."""
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def stores(url: str) -> Iterator[tuple[Store, Store]]:
    """Two connections to the store: one per scheduler, as two processes have."""
    first, second = open_store(url), open_store(url)
    yield first, second
    first.close()
    second.close()


async def _fail(attempt: Attempt) -> None:
    raise ConnectionError("down")


async def _until(condition: object, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _both_half_open(a: Scheduler, b: Scheduler, store: Store) -> None:
    """``a``'s call opens the breaker; ``b`` adopts the row (same opening time); both half-open."""
    with pytest.raises(ConnectionError):
        await a.submit(ToolCall("t"), _fail)
    shared = SharedBreakers(store)
    await _until(lambda: (row := shared.read(KEY)) is not None and row.state == "open", "the open row")
    with pytest.raises(CircuitOpen):  # b reads the row at its first call and opens
        await b.submit(ToolCall("t"), _fail)
    await _until(
        lambda: (
            a.breaker(KEY).state is BreakerState.HALF_OPEN and b.breaker(KEY).state is BreakerState.HALF_OPEN
        ),
        "both breakers half open",
    )


def _claims(store: Store) -> int:
    return len(LeaseManager(store).rows(PROBE_KEY))


async def test_two_schedulers_run_one_probe_between_them(stores: tuple[Store, Store]) -> None:
    """Review R67: with ``half_open_max_calls=1``, two schedulers on one store ran a probe each at
    once (half-open was worked out per process). Now the second is refused while the first runs,
    and runs once the first has closed the breaker."""
    a, b = Scheduler(_config(), store=stores[0]), Scheduler(_config(), store=stores[1])
    release = asyncio.Event()
    try:
        await _both_half_open(a, b, stores[0])
        running: list[str] = []

        async def probe(attempt: Attempt) -> str:
            running.append("probe")
            await release.wait()
            return "ok"

        async def second(attempt: Attempt) -> str:
            running.append("second probe")
            return "ok"

        first = asyncio.create_task(a.submit(ToolCall("t"), probe))
        await _until(lambda: running, "a's probe to start")
        with pytest.raises(CircuitOpen, match="half open"):
            await b.submit(ToolCall("t"), second)
        assert running == ["probe"]
        assert _claims(stores[1]) == 1
        release.set()
        assert await first == "ok"
        await _until(lambda: _claims(stores[1]) == 0, "the claim to be given back")
        assert a.breaker(KEY).state is BreakerState.CLOSED
    finally:
        release.set()
        await a.aclose()
        await b.aclose()


async def test_a_failed_probe_says_open_before_its_claim_is_free(stores: tuple[Store, Store]) -> None:
    """Review R67: a failed probe reopens the breaker; its claim is freed in the transaction that
    writes the opening, so the other process, still half open, cannot take the claim and probe
    again at once (the store says open: the claim is refused until the reset timeout passes)."""
    a, b = Scheduler(_config(), store=stores[0]), Scheduler(_config(), store=stores[1])
    try:
        await _both_half_open(a, b, stores[0])
        with pytest.raises(ConnectionError):
            await a.submit(ToolCall("t"), _fail)
        await _until(lambda: _claims(stores[1]) == 0, "the failed probe's claim to be given back")
        ran: list[str] = []

        async def probe(attempt: Attempt) -> str:
            ran.append("probe")
            return "ok"

        with pytest.raises(CircuitOpen):
            await b.submit(ToolCall("t"), probe)
        assert ran == []
    finally:
        await a.aclose()
        await b.aclose()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from agentgate.store import open_store
    from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

    async def main() -> None:
        config = SchedulerConfig(
            breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.2, half_open_max_calls=1),
            lease_ttl_s=float(sys.argv[2]),
        )
        scheduler = Scheduler(config, store=open_store(sys.argv[1]))
        async def fail(attempt: Attempt) -> None:
            raise ConnectionError("down")
        try:
            await scheduler.submit(ToolCall("t"), fail)
        except ConnectionError:
            pass
        while scheduler.breaker("tool:t").state is not BreakerState.HALF_OPEN:
            await asyncio.sleep(0.01)
        async def hang(attempt: Attempt) -> None:
            print("probing", flush=True)
            await asyncio.Event().wait()
        await scheduler.submit(ToolCall("t"), hang)

    asyncio.run(main())
    """
)


async def test_a_killed_probers_claim_expires(url: str, stores: tuple[Store, Store]) -> None:
    """Review R67: a process killed while its probe runs leaves its claim in the store: the other
    processes' probes are refused until the claim expires (``lease_ttl_s`` after its last
    renewal), never for good; then one runs and closes the breaker."""
    ttl_s = 5.0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, str(ttl_s)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "probing"
        assert _claims(stores[0]) == 1
        child.send_signal(signal.SIGKILL)
        child.wait()
        b = Scheduler(_config(reset_s=0.2, ttl_s=ttl_s), store=stores[1])
        try:
            ran: list[str] = []

            async def probe(attempt: Attempt) -> str:
                ran.append("probe")
                return "ok"

            refused = 0
            while True:  # refused while the dead child's claim lives, then admitted
                try:
                    assert await b.submit(ToolCall("t"), probe) == "ok"
                    break
                except CircuitOpen:
                    refused += 1
                    await asyncio.sleep(0.05)
            assert refused >= 1
            assert ran == ["probe"]
            assert b.breaker(KEY).state is BreakerState.CLOSED
        finally:
            await b.aclose()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


class _CountingStore(SQLiteStore):
    """The real SQLite store, every statement its connections run recorded."""

    statements: list[str]

    def connect(self, synchronous: str | None = None) -> sqlite3.Connection:
        conn = super().connect(synchronous)
        conn.set_trace_callback(self.statements.append)
        return conn


async def test_a_closed_breaker_takes_no_claim(tmp_path: Path) -> None:
    """Review R67: the claim costs nothing while the breaker is closed: 200 calls run no statement
    on the leases table, only the breaker row's periodic read (at most every 0.25 s a key)."""
    _CountingStore.statements = []
    store = _CountingStore(tmp_path / "agentgate.db")
    scheduler = Scheduler(_config(), store=store)
    try:

        async def ok(attempt: Attempt) -> str:
            return "ok"

        await scheduler.submit(ToolCall("t"), ok)  # the first read of the row
        before = len(_CountingStore.statements)
        for _ in range(200):
            await scheduler.submit(ToolCall("t"), ok)
        during = _CountingStore.statements[before:]
        assert not [s for s in during if "agentgate_leases" in s]
        assert all("agentgate_breakers" in s or s.startswith(("BEGIN", "COMMIT", "ROLLBACK")) for s in during)
    finally:
        await scheduler.aclose()
        store.close()


def test_the_claim_reads_the_row_and_its_release_writes_the_reopening(store: Store) -> None:
    """Review R67: the store side of a claim, on both stores: a claim is refused while the row says
    the breaker opened less than the reset timeout ago, and one claim at most is held at once; the
    release of a failed probe's claim writes the reopening in its own transaction (so no other
    process can take the claim before the row says open), but never over a later transition."""
    clock = [1000.0]
    prober = LeaseManager(store, holder="prober", clock=lambda: clock[0])
    other = LeaseManager(store, holder="other", clock=lambda: clock[0])
    shared = SharedBreakers(store)
    try:
        shared.publish(KEY, "open", 990.0)
        guard = SharedBreakers.probe_guard(KEY, 5.0)
        claim = prober.try_acquire(PROBE_KEY, 1, guard=guard)
        assert claim is not None  # opened 10 s ago, reset timeout 5 s: half open
        assert other.try_acquire(PROBE_KEY, 1, guard=guard) is None  # one probe at once
        prober.release(claim, before=SharedBreakers.reopen(KEY, 1000.0))
        row = shared.read(KEY)
        assert row is not None and (row.state, row.opened_at) == ("open", 1000.0)
        assert other.try_acquire(PROBE_KEY, 1, guard=guard) is None  # the store says open: refused
        clock[0] = 1005.0
        again = other.try_acquire(PROBE_KEY, 1, guard=guard)
        assert again is not None  # the reset timeout passed
        shared.publish(KEY, "closed", 1006.0)  # another probe closed it later
        other.release(again, before=SharedBreakers.reopen(KEY, 1004.0))
        row = shared.read(KEY)
        assert row is not None and row.state == "closed"
    finally:
        prober.close()
        other.close()
