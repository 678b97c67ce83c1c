"""Review r46, mutation 5: the task scheduler (retries, deadlines, breakers, fairness, limits,
rate buckets, leases, dead letters), mutated one change at a time; each test here kills a mutant
the earlier tests let live (the mutant each kills is named in its docstring)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest

from agentgate.errors import DeadlineExceeded
from agentgate.store import SQLiteStore, Store
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.store.leases import BUCKET_AHEAD_S, LeaseManager, SharedRateLimits
from agentgate.tasks import (
    Attempt,
    Classifier,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TokenBucket,
    ToolCall,
    ToolLimits,
)


class Transient(Exception):
    error_class = "transient"


class Ambiguous(Exception):
    """No ``error_class``: what a tool raises after its effect may have happened."""


class TopOfRange(random.Random):
    """A random source whose every jitter draw is the top of its range (the longest backoff)."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Broken(Classifier):
    def __call__(self, error: BaseException) -> str | None:
        raise ValueError("classifier bug")


async def test_a_retry_whose_backoff_ends_past_the_deadline_is_not_waited_for() -> None:
    """The backoff before the retry (2 s) ends past the call's deadline (in 0.5 s): the call gives
    up at once with the tool's own error and one attempt, reason ``deadline``. Kills: the
    deadline check on the backoff dropped (``_failed``: the call slept through the backoff, then
    was refused at admission with ``DeadlineExceeded`` instead of the tool's error)."""
    policy = RetryPolicy(attempts=5, backoff_initial_s=2.0, backoff_max_s=2.0, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)}), rng=TopOfRange())
    attempts: list[int] = []

    async def tool(attempt: Attempt) -> None:
        attempts.append(attempt.number)
        raise Transient("upstream 503")

    with pytest.raises(Transient, match="upstream 503"):
        await scheduler.submit(ToolCall("t", deadline=time.time() + 0.5), tool)
    assert attempts == [1]
    [letter] = scheduler.dead_letters()
    assert letter.reason == "deadline"
    assert scheduler.metrics.count("retried", "t") == 0
    await scheduler.aclose()


async def test_a_classifier_that_raises_makes_the_failure_ambiguous_never_transient() -> None:
    """A classifier that raises must leave the failure in the safe class (``error``: ambiguous),
    so a non-idempotent tool is not repeated even though ``transient`` is retried. Kills: the
    fallback class of a raising classifier set to ``transient`` (``_failed``: a possibly-done
    payment repeated)."""
    policy = RetryPolicy(attempts=3, backoff_initial_s=0.001, backoff_max_s=0.001, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"pay": ToolLimits(retry=policy)}), classifier=Broken())
    attempts: list[int] = []

    async def pay(attempt: Attempt) -> None:
        attempts.append(attempt.number)
        raise Ambiguous("connection reset after the request was sent")

    with pytest.raises(Ambiguous):
        await scheduler.submit(ToolCall("pay"), pay)
    assert attempts == [1]
    [letter] = scheduler.dead_letters()
    assert [e.error_class for e in letter.errors] == ["error"]
    assert letter.reason == "not_retryable"
    await scheduler.aclose()


def test_a_shared_bucket_behind_a_hosts_clock_asks_one_tokens_wait_not_the_lag(store: Store) -> None:
    """A host whose clock is 30 s behind the host that took the last token is told to wait one
    token's time (0.1 s at 10/s), never minus-30-s of refill: time running backwards neither
    refills nor drains the bucket. Kills: ``max(0.0, now - since)`` dropped in
    ``SharedRateLimits.try_take`` (the lag drained 300 tokens: a 30 s wait for every process)."""
    now = [10_000.0]
    ahead = SharedRateLimits(store, clock=lambda: now[0])
    behind = SharedRateLimits(store, clock=lambda: now[0] - 30.0)
    assert ahead.try_take("tool:api", 10.0, 1) == 0.0
    assert behind.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)
    now[0] += 0.1  # the behind host's clock moved on 0.1 s as well: the bucket is still empty
    assert behind.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)


def test_a_shared_bucket_dated_far_ahead_refills_once_the_cap_has_passed(store: Store) -> None:
    """A host whose clock was an hour ahead emptied the bucket (its row is dated an hour on).
    The bucket is believed only ``BUCKET_AHEAD_S`` ahead, and re-dated so, even while empty: a
    token comes back ``BUCKET_AHEAD_S`` + one token's time later, not an hour later. Kills: the
    cap dropped (``since = updated_at``), and the re-dating of an empty bucket dropped."""
    now = [20_000.0]
    stepped = SharedRateLimits(store, clock=lambda: now[0] + 3600.0)
    honest = SharedRateLimits(store, clock=lambda: now[0])
    assert stepped.try_take("tool:api", 10.0, 1) == 0.0
    assert honest.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)  # empty, as written
    now[0] += BUCKET_AHEAD_S + 0.2
    assert honest.try_take("tool:api", 10.0, 1) == 0.0


async def test_a_shared_rate_token_due_past_the_deadline_is_not_waited_for(tmp_path: Path) -> None:
    """With the shared bucket (through the store) empty and its next token 5 s away, a call with
    0.3 s left gives up at once, saying no token comes before its deadline. Kills: the deadline
    check in ``_shared_token`` dropped (the call slept 5 s for a token it could not use, then
    was refused as started late)."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=0.2, burst=1))})
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)  # two processes
    ran: list[int] = []

    async def tool(attempt: Attempt) -> None:
        ran.append(attempt.number)

    await first.submit(ToolCall("api"), tool)
    with pytest.raises(DeadlineExceeded, match="rate token across processes before the deadline"):
        await second.submit(ToolCall("api", deadline=time.time() + 0.3), tool)
    assert ran == [1]
    await first.aclose()
    await second.aclose()
    store.close()


def test_a_sync_call_does_not_take_the_rate_token_a_waiting_call_is_owed() -> None:
    """B waits for the tool's next rate token; the token comes (the bucket's clock moves on)
    before the rate timer has dispatched; C, a sync call that arrives then, queues behind B
    instead of taking the token: calls of one agent to one tool start in arrival order. Kills:
    ``start_now`` starting a call while others wait (``self.queue.size`` dropped: the async
    path checks the queue first, the sync facade and nested calls rely on it)."""
    fake = [0.0]
    limits = SharedLimits(SchedulerConfig(tools={"t": ToolLimits(rate=RateLimit(per_second=0.01, burst=1))}))
    # A real bucket on a clock the test moves: the timer waits 100 real seconds for its token.
    limits.buckets["t"] = TokenBucket(0.01, 1, clock=lambda: fake[0])
    sync = SyncScheduler(limits=limits)
    order: list[str] = []
    sync.submit(ToolCall("t"), lambda attempt: order.append("A"))
    b = threading.Thread(target=sync.submit, args=(ToolCall("t"), lambda attempt: order.append("B")))
    b.start()
    until(lambda: limits.queued == 1)
    fake[0] += 100.0  # one token due; the timer thread is still asleep
    c = threading.Thread(target=sync.submit, args=(ToolCall("t"), lambda attempt: order.append("C")))
    c.start()
    until(lambda: len(order) == 2 and limits.queued == 1)
    fake[0] += 100.0
    with limits.lock:
        limits.dispatch()
    b.join(10)
    c.join(10)
    assert order == ["A", "B", "C"]
    sync.close()
    limits.close()


def until(condition: object, timeout_s: float = 10.0) -> None:
    """Poll ``condition`` (a callable) until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


async def test_one_agents_calls_to_two_tools_start_in_arrival_order() -> None:
    """Under a global limit of 1, one agent's waiting calls to tools a and b start in the order
    they came (the agent's tool FIFOs are merged by arrival). Kills: ``_pick_tool`` choosing the
    FIFO whose head came last (``queue[0].seq > best[0].seq``)."""
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1))
    gate = asyncio.Event()
    order: list[str] = []

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    def named(name: str):  # type: ignore[no-untyped-def]
        async def tool(attempt: Attempt) -> None:
            order.append(name)

        return tool

    holding = asyncio.create_task(scheduler.submit(ToolCall("h"), hold))
    await asyncio.sleep(0)
    waiting = []
    for n, tool in enumerate(["a", "b", "a", "b", "b", "a"]):
        waiting.append(asyncio.create_task(scheduler.submit(ToolCall(tool), named(f"{tool}{n}"))))
        await asyncio.sleep(0)
        assert scheduler.queued == n + 1
    gate.set()
    await asyncio.gather(holding, *waiting)
    assert order == ["a0", "b1", "a2", "b3", "b4", "a5"]
    await scheduler.aclose()


def test_live_slots_above_a_lowered_limit_count_against_it(store: Store) -> None:
    """A process whose policy still allows 3 holds slots 1 and 2; a process whose policy was
    lowered to 2 sees 2 live slots and takes none, though slot 0 is free: the limit counts every
    live slot, not just those below it. Kills: ``len(taken) > limit`` in ``try_acquire`` (a
    third call ran under a limit of 2)."""
    old, new = LeaseManager(store, ttl_s=30), LeaseManager(store, ttl_s=30)
    held = [old.try_acquire("tool:pay", 3) for _ in range(3)]
    assert all(held) and sorted(lease.slot for lease in held if lease) == [0, 1, 2]
    first = next(lease for lease in held if lease is not None and lease.slot == 0)
    old.release(first)
    assert new.try_acquire("tool:pay", 2) is None
    assert len(new.rows("tool:pay")) == 2
    old.close()
    new.close()


def test_a_shared_bucket_idle_for_long_holds_no_more_than_its_burst(store: Store) -> None:
    """After 100 s idle at 10/s, a shared bucket of burst 2 gives 2 tokens, then asks a token's
    wait: idle time never saves more than the burst. Kills: ``min(float(burst), ...)`` dropped in
    ``SharedRateLimits.try_take`` (1,000 tokens saved up: a burst of 1,000 calls)."""
    now = [30_000.0]
    rates = SharedRateLimits(store, clock=lambda: now[0])
    assert rates.try_take("tool:api", 10.0, 2) == 0.0
    now[0] += 100.0
    assert [rates.try_take("tool:api", 10.0, 2) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]


def test_a_released_lease_is_no_longer_held_nor_renewed(store: Store) -> None:
    """A lease given back leaves the holder's set: ``held`` drops to 0 and ``renew`` renews
    nothing (the heartbeat never pushes its expiry again, whatever the store did with the
    release). Kills: ``release`` not discarding the lease from the held set."""
    manager = LeaseManager(store, ttl_s=30)
    lease = manager.try_acquire("tool:x", 1)
    assert lease is not None and manager.held() == 1
    manager.release(lease)
    assert manager.held() == 0
    assert manager.renew() == 0
    manager.close()


def test_prune_keeps_a_dead_letter_recorded_at_the_cut(store: Store) -> None:
    """``prune(before)`` forgets letters recorded *before* ``before``: one recorded at that very
    second stays. Kills: ``recorded_at <= ?`` in ``DeadLetterStore.prune``."""
    letters = DeadLetterStore(store)
    for n, at in enumerate((99.0, 100.0, 101.0)):
        letters.record(
            DeadLetter(f"id-{n}", at, "t", "acme", "agent", None, None, None, "d", (), "deadline", ())
        )
    assert letters.prune(100.0) == 1
    assert [x.id for x in letters.recent()] == ["id-2", "id-1"]


async def test_the_scheduler_keeps_only_the_newest_thousand_dead_letters() -> None:
    """The in-memory dead letters are bounded: after 1,005 calls given up, the newest 1,000 are
    kept, oldest first. Kills: the trim (``del self._dead[:-_DEAD_LETTERS_KEPT]``) dropped (a
    scheduler's memory grew with every failed call)."""
    scheduler = Scheduler()

    async def tool(attempt: Attempt) -> None:
        raise ValueError("no")

    for n in range(1005):
        with pytest.raises(ValueError):
            await scheduler.submit(ToolCall("t", call_id=f"c{n}", run_id="r"), tool)
    letters = scheduler.dead_letters()
    assert len(letters) == 1000
    assert (letters[0].call_id, letters[-1].call_id) == ("c5", "c1004")
    await scheduler.aclose()
