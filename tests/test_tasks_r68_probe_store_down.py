"""Review R68: a half-open probe needs its claim in the store; the store down, none runs (decided).

The question left open by review R67: with the store unreachable, should a half-open breaker let a
probe run under a claim of this process alone? Decided no (docs/tasks.md, "Sharing limits across
processes"): ``half_open_max_calls`` bounds the probes of every process sharing the store, and
without the store a process can neither keep that bound nor see that another process's probe
opened the breaker again; every process probing on its own is the herd the bound holds off a
recovering backend. The call is refused with the store's error, its probe given back, so the
first call after the store is back probes (and closes the breaker).

A real SQLite file made unreachable for writes by another connection holding its write lock
(busy timeout 0), no sleep as synchronisation.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

KEY = "tool:t"
WAIT_S = 20.0  # bound on the wait for half-open: only a bug comes near it


async def _fail(attempt: Attempt) -> None:
    raise ConnectionError("down")


async def test_no_probe_runs_while_the_store_is_down_and_one_runs_once_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R68: the store unreachable, a half-open breaker runs no probe (the tool is not
    called, the caller gets ``StoreError``) and keeps its probe free: once the store is back,
    the next call is the probe, and its success closes the breaker."""
    monkeypatch.setenv("AGENTGATE_SQLITE_BUSY_TIMEOUT", "0")
    path = tmp_path / "agentgate.db"
    store = open_store(str(path))
    config = SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05, half_open_max_calls=1)
    )
    scheduler = Scheduler(config, store=store)
    breaker = scheduler.breaker(KEY)
    ran: list[int] = []

    async def ok(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ok"

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("t"), _fail)
        end = time.monotonic() + WAIT_S
        while breaker.state is not BreakerState.HALF_OPEN:
            assert time.monotonic() < end, "the breaker never half-opened"
            await asyncio.sleep(0.01)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the write lock: the claim's transaction cannot write
        try:
            with pytest.raises(StoreError):
                await scheduler.submit(ToolCall("t"), ok)
            assert ran == []
            assert breaker.state is BreakerState.HALF_OPEN
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert await scheduler.submit(ToolCall("t"), ok) == "ok"
        assert ran == [1]
        assert breaker.state is BreakerState.CLOSED
    finally:
        await scheduler.aclose()
        store.close()
