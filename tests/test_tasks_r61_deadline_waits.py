"""Review R61: a call whose deadline passes while it waits (a concurrency slot, a rate token, a
lease shared through the store) ends with ``DeadlineExceeded`` naming what it waited for, and
holds nothing afterwards: no slot, no token, no lease, no place in the queue.

Real schedulers, a real SQLite store file for the cross-process leases and rate buckets.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest

from agentgate.errors import DeadlineExceeded
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
)

SHORT_S = 0.1  # the waiting call's deadline, from now
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


async def _ok(attempt: Attempt) -> str:
    return "ok"


def _sync_ok(attempt: Attempt) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("config", "call", "named"),
    [
        (SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), ToolCall("t"), "tool t's concurrency"),
        (SchedulerConfig(max_concurrency=1), ToolCall("t"), "the global concurrency"),
        (
            SchedulerConfig(tenants={"acme": TenantShare(concurrency=1)}),
            ToolCall("t", tenant="acme"),
            "tenant 'acme'",
        ),
        (SchedulerConfig(principal_concurrency=1), ToolCall("t", principal="did:x"), "agent 'did:x'"),
    ],
)
async def test_a_call_out_of_time_waiting_for_a_slot_says_which_and_holds_nothing(
    config: SchedulerConfig, call: ToolCall, named: str
) -> None:
    """Review R61: a queued call whose deadline passes while a full limit (the tool's, the
    global, the tenant's, the agent's) keeps it waiting raises ``DeadlineExceeded`` naming that
    limit, leaves the queue, and takes no slot: when the holder ends, a new call starts at once."""
    scheduler = Scheduler(config)
    release = asyncio.Event()

    async def hold(attempt: Attempt) -> str:
        await release.wait()
        return "held"

    holder = asyncio.create_task(scheduler.submit(call, hold))
    while scheduler.in_flight < 1:
        await asyncio.sleep(0.001)
    late = ToolCall(call.tool, tenant=call.tenant, principal=call.principal, deadline=time.time() + SHORT_S)
    with pytest.raises(DeadlineExceeded, match=named) as caught:
        await scheduler.submit(late, _ok)
    assert caught.value.waited_s is not None
    assert scheduler.queued == 0
    release.set()
    assert await holder == "held"
    assert scheduler.in_flight == 0
    assert await asyncio.wait_for(scheduler.submit(call, _ok), WAIT_S) == "ok"
    await scheduler.aclose()


def test_a_sync_call_out_of_time_waiting_for_a_slot_says_which_and_holds_nothing() -> None:
    """Review R61: the same under ``SyncScheduler``: the sync caller's ``DeadlineExceeded``
    names the full limit it waited for, and no slot or queue place is left behind."""
    scheduler = SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    holding = threading.Event()
    release = threading.Event()

    def hold(attempt: Attempt) -> str:
        holding.set()
        assert release.wait(WAIT_S)
        return "held"

    holder = threading.Thread(target=scheduler.submit, args=(ToolCall("t"), hold))
    holder.start()
    assert holding.wait(WAIT_S)
    with pytest.raises(DeadlineExceeded, match="tool t's concurrency"):
        scheduler.submit(ToolCall("t", deadline=time.time() + SHORT_S), _sync_ok)
    assert scheduler.scheduler.queued == 0
    release.set()
    holder.join(WAIT_S)
    assert scheduler.scheduler.in_flight == 0
    assert scheduler.submit(ToolCall("t"), _sync_ok) == "ok"
    scheduler.close()


async def test_a_call_out_of_time_waiting_for_a_rate_token_says_so_and_takes_none() -> None:
    """Review R61: a call whose deadline passes while it waits for its tool's rate token raises
    ``DeadlineExceeded`` naming the rate limit, and takes no token: the bucket refills for the
    next call as if the call had never come."""
    config = SchedulerConfig(tools={"t": ToolLimits(rate=RateLimit(per_second=2.0, burst=1))})
    scheduler = Scheduler(config)
    assert await scheduler.submit(ToolCall("t"), _ok) == "ok"  # the one token: the next in 0.5 s
    with pytest.raises(DeadlineExceeded, match="tool t's rate limit"):
        await scheduler.submit(ToolCall("t", deadline=time.time() + SHORT_S), _ok)
    assert scheduler.queued == 0
    bucket = scheduler.shared._bucket("t", config.tools["t"])
    assert bucket.wait_s() <= 0.5
    assert await asyncio.wait_for(scheduler.submit(ToolCall("t"), _ok), WAIT_S) == "ok"
    await scheduler.aclose()


async def test_a_call_out_of_time_waiting_for_a_shared_lease_holds_nothing(tmp_path: Path) -> None:
    """Review R61: a call whose deadline passes while another process holds the tool's only
    cross-process lease raises ``DeadlineExceeded`` naming the lease, holds no local slot and no
    lease afterwards: the other process's next call takes the lease at once."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)  # two processes
    release = asyncio.Event()

    async def hold(attempt: Attempt) -> str:
        await release.wait()
        return "held"

    holder = asyncio.create_task(first.submit(ToolCall("t"), hold))
    assert first._leases is not None and second._leases is not None
    while first._leases.held() < 1:
        await asyncio.sleep(0.001)
    with pytest.raises(DeadlineExceeded, match="slot free across processes"):
        await second.submit(ToolCall("t", deadline=time.time() + SHORT_S), _ok)
    assert second.in_flight == 0 and second.queued == 0
    assert second._leases.held() == 0
    release.set()
    assert await holder == "held"
    assert (
        await asyncio.wait_for(second.submit(ToolCall("t", deadline=time.time() + WAIT_S), _ok), WAIT_S)
        == "ok"
    )
    await first.aclose()
    await second.aclose()
    assert not [row for row in first._leases.rows("tool:t") if row.expires_at > time.time()]
    store.close()


async def test_a_call_out_of_time_waiting_for_a_shared_rate_token_holds_nothing(tmp_path: Path) -> None:
    """Review R61: a call whose deadline passes before the rate token shared through the store
    would come raises ``DeadlineExceeded`` naming the token, and gives back its local slot."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1, rate=RateLimit(per_second=0.5, burst=1))})
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)
    assert await first.submit(ToolCall("t"), _ok) == "ok"  # the shared token: the next in 2 s
    with pytest.raises(DeadlineExceeded, match="rate token across processes"):
        await second.submit(ToolCall("t", deadline=time.time() + SHORT_S), _ok)
    assert second.in_flight == 0 and second.queued == 0
    assert second._leases is not None and second._leases.held() == 0
    await first.aclose()
    await second.aclose()
    store.close()


class _MostJitter(random.Random):
    """Jitter at its largest: a wait for a shared token sleeps 10% past the token's time."""

    def random(self) -> float:
        return 0.99


async def test_a_shared_rate_token_due_before_the_deadline_is_not_jittered_past_it(tmp_path: Path) -> None:
    """Review R61: a call waiting for a rate token shared through the store slept the token's
    wait plus up to 10% jitter, even past its deadline: a token due 3 s away, with a deadline
    3.25 s away, was taken after the deadline (the most jitter: 3.3 s) and spent, the call refused
    with ``DeadlineExceeded``. The sleep now ends halfway between the token and the deadline
    and the call runs. Here the token is due 10 s away and the deadline 10.9 s away (the most
    jitter still sleeps past it: 10.99 s), so the sleep ends 450 ms from either: with 3 s and
    3.25 s (125 ms), a full run on two busy cores once woke too late (review R74)."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"t": ToolLimits(rate=RateLimit(per_second=1 / 10, burst=1))})
    first = Scheduler(config, store=store)
    second = Scheduler(config, store=store, rng=_MostJitter())
    assert await first.submit(ToolCall("t"), _ok) == "ok"  # the shared token: the next in 10 s
    assert await second.submit(ToolCall("t", deadline=time.time() + 10.9), _ok) == "ok"
    await first.aclose()
    await second.aclose()
    store.close()


async def test_a_sync_call_out_of_time_waiting_for_a_shared_lease_holds_nothing(tmp_path: Path) -> None:
    """Review R61: under ``SyncScheduler`` with a store (each attempt handed to its loop thread),
    a call whose deadline passes while another process holds the tool's only lease raises
    ``DeadlineExceeded`` naming the lease, and holds no local slot or lease afterwards."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    first = Scheduler(config, store=store)
    second = SyncScheduler(config, store=store)
    release = asyncio.Event()

    async def hold(attempt: Attempt) -> str:
        await release.wait()
        return "held"

    holder = asyncio.create_task(first.submit(ToolCall("t"), hold))
    assert first._leases is not None
    while first._leases.held() < 1:
        await asyncio.sleep(0.001)
    call = ToolCall("t", deadline=time.time() + SHORT_S)
    with pytest.raises(DeadlineExceeded, match="slot free across processes"):
        await asyncio.to_thread(second.submit, call, _sync_ok)
    core = second.scheduler
    assert core.in_flight == 0 and core.queued == 0
    assert core._leases is not None and core._leases.held() == 0
    release.set()
    assert await holder == "held"
    again = ToolCall("t", deadline=time.time() + WAIT_S)
    assert await asyncio.to_thread(second.submit, again, _sync_ok) == "ok"
    await first.aclose()
    await asyncio.to_thread(second.close)
    store.close()
