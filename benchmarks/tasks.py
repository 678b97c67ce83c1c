"""Scheduler overhead: 20,000 no-op tool calls through agentgate's scheduler vs a bare asyncio baseline.

Both sides run the same work in the same process, one after the other, best of ``--repeat`` runs,
timed in CPU seconds of the process (``time.process_time``: the work is one busy thread, and CPU
time does not count the waits that other programs on a shared machine cause):
every call is a coroutine that yields to the event loop once (``await asyncio.sleep(0)``), so the
concurrency limits really bind and calls really queue.

- bare: ``asyncio.gather`` of all calls, each under ``asyncio.Semaphore(limit)`` of its tool.
- scheduler: ``asyncio.gather`` of ``Scheduler.submit`` for all calls, with the same per-tool
  limits, three priority classes and four tenants (so the fair queue has work to do). Each call's
  ``ToolCall`` is made inside the timing (its checks are per-call work of the scheduler, which
  ``Gate.run`` pays on every call; before review R32 they were made before the timing).

Goal: scheduler time <= 2.0 x bare time. Prints a table, then one JSON line (the last line).

Sync figures (no goal; wall time, best of the repeats): ``SyncScheduler.submit`` of a no-op
function from one thread, without and with an idempotency key (the gate's calls have one), and
with a key whose arguments digest is given (as ``Gate.run`` gives it: the key then hashes once),
in microseconds per call; and 8 threads sharing a limit of 2 (every call contends) through the
scheduler against ``threading.BoundedSemaphore(2)`` doing the same work (which barges and keeps
no order, so it is a floor, not an equal).

Opcodes (``--opcodes N``, no goal): the Python opcodes each side runs per call over N calls
(``sys.settrace`` with ``f_trace_opcodes``), a count a loaded machine does not move, where the
timings move by several percent: what docs/tasks.md's reviews of the scheduler's hot path give.

Held at a limit (``SharedLimits`` driven directly, under its lock, as the scheduler drives it): N
holders each run one call to one tool and have ``HELD_WAITING`` more waiting; every running call
finishes in turn and its holder's next starts. Microseconds per finish (and the dispatch it makes),
best of the repeats, at N = 100 and 1,000, for (a) N tenants each at ``TenantShare(concurrency=1)``,
(b) one tenant, N agents at ``principal_concurrency=1``, (c) case (a) with the tool rate limited
(a token always there, but a token may have come since the last dispatch, so every finish walks
the whole queue: no goal, the cost the shortcut of review R93 does not reach). Goals: the cost at
1,000 over the cost at 100 for (a) and (b), measured side by side, <= 3 (before review R93 a finish
walked every holder ahead of the freed one, and the cost grew with N).

    .venv/bin/python benchmarks/tasks.py [--quick] [--json] [--calls N] [--repeat R] [--opcodes N]

``--quick`` runs 2,000 calls and 2 repeats where ``--calls`` and ``--repeat`` name none.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's agentgate, not an installed one

from prometheus_client import CollectorRegistry

from agentgate.tasks import (
    Attempt,
    PriorityClass,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
    argument_digest,
)
from agentgate.tasks._config import RateLimit
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._sync import _Wake
from agentgate.tasks._waiter import Waiter
from benchmarks._args import whole_up_to

MAX_CALLS = 1_000_000
"""The most ``--calls`` taken: 50 times the default, every call's task in memory at once (until
review R88 any number of digits was taken, and ran without end)."""
MAX_REPEAT = 100
"""The most ``--repeat`` taken: about 11 times the default 9, each repeat running every figure
(until review R88c any number of digits was taken, and ran without end)."""
MAX_OPCODE_CALLS = 100_000
"""The most ``--opcodes`` taken: about 30 times the 3,000 calls docs/tasks.md counts over, each of
their opcodes traced in Python (until review R88 any number was taken)."""

TOOLS = 10
LIMIT = 16
TENANTS = 4
CLASSES = (
    PriorityClass("interactive", 0, 1.0),
    PriorityClass("batch", 1, 1.0),
    PriorityClass("background", 2, 1.0),
)


async def _noop() -> None:
    await asyncio.sleep(0)


async def bare(calls: int) -> float:
    limits = {f"tool{i}": asyncio.Semaphore(LIMIT) for i in range(TOOLS)}

    async def one(i: int) -> None:
        async with limits[f"tool{i % TOOLS}"]:
            await _noop()

    start = time.process_time()
    await asyncio.gather(*(one(i) for i in range(calls)))
    return time.process_time() - start


async def scheduled(calls: int) -> float:
    config = SchedulerConfig(
        priority_classes=CLASSES,
        default_priority="batch",
        tools={f"tool{i}": ToolLimits(concurrency=LIMIT) for i in range(TOOLS)},
    )
    scheduler = Scheduler(config)
    tenants = [f"tenant{i}" for i in range(TENANTS)]

    async def work(_attempt: object) -> None:
        await _noop()

    # Each call's ToolCall is made (and validated) inside the timing, as the gate makes one per
    # call; the bare side names its tool inside the timing too.
    start = time.process_time()
    await asyncio.gather(
        *(
            scheduler.submit(
                ToolCall(f"tool{i % TOOLS}", tenant=tenants[i % TENANTS], priority=CLASSES[i % 3].name), work
            )
            for i in range(calls)
        )
    )
    elapsed = time.process_time() - start
    await scheduler.aclose()
    return elapsed


def _noop_sync(_attempt: Attempt) -> None:
    return None


def sync_uncontended(calls: int, *, keyed: bool, digested: bool = False) -> float:
    """Microseconds per ``SyncScheduler.submit`` of a no-op from one thread (never waits).

    ``digested``: each keyed call carries its ``arguments_digest``, as ``Gate.run``'s calls do (the
    authority engine digested the arguments to decide), so the key hashes once instead of twice.
    """
    stamp = time.time_ns()
    requests = [
        ToolCall(
            "t",
            arguments={"i": i},
            run_id=f"run{stamp}" if keyed else None,
            call_id=str(i),
            arguments_digest=argument_digest({"i": i}) if digested else None,
        )
        for i in range(calls)
    ]
    with SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=2)})) as scheduler:
        submit = scheduler.submit
        start = time.perf_counter()
        for call in requests:
            submit(call, _noop_sync)
        elapsed = time.perf_counter() - start
    return elapsed / calls * 1e6


def _yield(_attempt: object = None) -> None:
    time.sleep(0)  # lets another thread run, as any real tool would


def sync_contended(calls: int) -> tuple[float, float]:
    """Microseconds per call, 8 threads through a limit of 2: (scheduler, BoundedSemaphore)."""
    requests = [ToolCall("t", arguments={"i": i}) for i in range(calls)]
    semaphore = threading.BoundedSemaphore(2)

    def bare_one(_call: ToolCall) -> None:
        with semaphore:
            _yield()

    with ThreadPoolExecutor(max_workers=8) as pool:
        start = time.perf_counter()
        list(pool.map(bare_one, requests))
        bare_us = (time.perf_counter() - start) / calls * 1e6
        with SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=2)})) as scheduler:
            start = time.perf_counter()
            list(pool.map(lambda call: scheduler.submit(call, _yield), requests))
            sched_us = (time.perf_counter() - start) / calls * 1e6
    return sched_us, bare_us


HELD_SIZES = (100, 1_000)
HELD_WAITING = 2
"""Calls each holder has waiting behind its running one: each round of finishes starts one."""
HELD_CASES: dict[str, tuple[SchedulerConfig, Callable[[int], str]]] = {
    "blocked_tenants": (SchedulerConfig(tenant=TenantShare(concurrency=1)), lambda i: f"t{i}"),
    "blocked_agents": (SchedulerConfig(principal_concurrency=1), lambda i: "t"),
    "blocked_tenants_rate_limited": (
        SchedulerConfig(
            tenant=TenantShare(concurrency=1),
            tools={"x": ToolLimits(rate=RateLimit(per_second=1e9, burst=10**9))},
        ),
        lambda i: f"t{i}",
    ),
}


def held_finish_us(config: SchedulerConfig, tenant_of: Callable[[int], str], holders: int) -> float:
    """Microseconds per finish (and its dispatch) with ``holders`` agents (``p<i>`` of tenant
    ``tenant_of(i)``) each running one call to ``x`` at its limit and ``HELD_WAITING`` waiting."""
    shared = SharedLimits(config)
    metrics = SchedulerMetrics(CollectorRegistry(), queue_depth=dict, in_flight={}, breakers=list)
    default = PriorityClass("default")
    limits = shared.tool_limits("x")
    try:
        with shared.lock:
            # Every holder's first call starts while the queue is empty; then its others queue.
            calls = [ToolCall("x", tenant=tenant_of(i), principal=f"p{i}") for i in range(holders)]
            held: list[list[Waiter]] = []
            for call in calls:
                first = shared.start_now(call, limits)
                if first is None:
                    raise RuntimeError("held: a holder's first call did not start")
                held.append([first])
            for call, waiters in zip(calls, held, strict=True):
                for _ in range(HELD_WAITING):
                    waiters.append(shared.enqueue(call, limits, default, False, _Wake(), metrics))
            gc.collect()
            start = time.perf_counter()
            for k in range(HELD_WAITING):
                for waiters in held:
                    shared.finish(waiters[k])
            elapsed = time.perf_counter() - start
            if not all(waiters[-1].granted for waiters in held):
                raise RuntimeError("held: a finish did not start its holder's next call")
    finally:
        shared.close()
    return elapsed / (holders * HELD_WAITING) * 1e6


def held_figures(repeat: int) -> dict[str, float]:
    """``<case>_<N>_us`` for every case of ``HELD_CASES`` and N of ``HELD_SIZES``, best of
    ``repeat``; the sizes of one case alternate, so a ratio is measured side by side."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        for case, (config, tenant_of) in HELD_CASES.items():
            for holders in HELD_SIZES:
                name = f"{case}_{holders}_us"
                us = held_finish_us(config, tenant_of, holders)
                best[name] = min(us, best.get(name, us))
    return best


def opcodes_per_call(run: Callable[[int], Awaitable[float]], calls: int) -> float:
    """The Python opcodes ``run(calls)`` runs per call, counted by ``sys.settrace`` with
    ``f_trace_opcodes`` in every frame it enters (the event loop's Python frames included)."""
    count = 0

    def opcode(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "opcode":
            count += 1
        return opcode

    def entered(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return opcode

    async def traced() -> None:
        sys.settrace(entered)
        try:
            await run(calls)
        finally:
            sys.settrace(None)

    asyncio.run(traced())
    return count / calls


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2,000 calls, 2 repeats, where --calls and --repeat name none"
    )
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    # The contended sync figure runs calls // 8 calls: at least one. Each size given is kept with
    # --quick, which sets only those not given (as dispatch.py's, audit.py's and dispatch_http.py's
    # --quick do): until review R87 --quick silently replaced both with 2,000 and 2.
    parser.add_argument(
        "--calls",
        type=whole_up_to(8, MAX_CALLS, "calls held in memory at once"),
        default=None,
        help=f"8 to {MAX_CALLS:,}, default 20,000 (--quick: 2,000)",
    )
    parser.add_argument(
        "--repeat",
        type=whole_up_to(1, MAX_REPEAT, "runs of every figure"),
        default=None,
        help=f"1 to {MAX_REPEAT:,}, default 9 (--quick: 2)",
    )
    parser.add_argument(
        "--opcodes",
        type=whole_up_to(0, MAX_OPCODE_CALLS, "calls traced opcode by opcode"),
        default=0,
        metavar="N",
        help=f"also count opcodes per call over N calls, 0 to {MAX_OPCODE_CALLS:,}",
    )
    args = parser.parse_args(argv)
    calls = args.calls if args.calls is not None else 2_000 if args.quick else 20_000
    repeat = args.repeat if args.repeat is not None else 2 if args.quick else 9

    bare_s, sched_s = [], []
    for _ in range(repeat):
        gc.collect()
        bare_s.append(asyncio.run(bare(calls)))
        gc.collect()
        sched_s.append(asyncio.run(scheduled(calls)))
    sync_calls = calls // 2
    sync_plain = min(sync_uncontended(sync_calls, keyed=False) for _ in range(repeat))
    sync_keyed = min(sync_uncontended(sync_calls, keyed=True) for _ in range(repeat))
    sync_digested = min(sync_uncontended(sync_calls, keyed=True, digested=True) for _ in range(repeat))
    contended = [sync_contended(sync_calls // 4) for _ in range(repeat)]
    sync_busy, semaphore_busy = min(c[0] for c in contended), min(c[1] for c in contended)
    b, s = min(bare_s), min(sched_s)
    ratio = s / b
    added_us = (s - b) / calls * 1e6
    rows = [
        ("asyncio.Semaphore + gather", b, calls / b),
        ("agentgate Scheduler", s, calls / s),
    ]
    print(
        f"{calls} no-op calls, {TOOLS} tools x limit {LIMIT}, {TENANTS} tenants, 3 priority classes, best of {repeat}"
    )
    print(f"{'runner':<30} {'seconds':>9} {'calls/s':>11}")
    for name, seconds, rate in rows:
        print(f"{name:<30} {seconds:>9.4f} {rate:>11.0f}")
    print(f"ratio scheduler/bare: {ratio:.2f}   added per call: {added_us:.1f} us")
    print(
        f"sync submit of a no-op, one thread: {sync_plain:.1f} us, with an idempotency key: "
        f"{sync_keyed:.1f} us, keyed with its arguments digest given (as Gate.run's calls): "
        f"{sync_digested:.1f} us ({sync_calls} calls)"
    )
    print(
        f"sync, 8 threads, limit 2: scheduler {sync_busy:.1f} us/call, "
        f"BoundedSemaphore {semaphore_busy:.1f} us/call ({sync_calls // 4} calls)"
    )
    held = held_figures(min(repeat, 3))
    small, large = HELD_SIZES
    held_ratio = {
        case: held[f"{case}_{large}_us"] / held[f"{case}_{small}_us"]
        for case in ("blocked_tenants", "blocked_agents")
    }
    print(
        f"held at a limit, us per finish and its dispatch (N = {small:,} / {large:,}), best of {min(repeat, 3)}:"
    )
    for case in HELD_CASES:
        print(f"  {case:<30} {held[f'{case}_{small}_us']:>9.1f} {held[f'{case}_{large}_us']:>9.1f}")
    counted = {}
    if args.opcodes:
        counted = {
            "opcodes_per_call_bare": round(opcodes_per_call(bare, args.opcodes), 1),
            "opcodes_per_call_scheduler": round(opcodes_per_call(scheduled, args.opcodes), 1),
        }
        print(
            f"opcodes per call over {args.opcodes} calls: bare {counted['opcodes_per_call_bare']}, "
            f"scheduler {counted['opcodes_per_call_scheduler']}"
        )
    print(
        json.dumps(
            {
                "benchmark": "tasks",
                "figures": {
                    "calls": calls,
                    "bare_s": round(b, 4),
                    "scheduler_s": round(s, 4),
                    "bare_calls_per_s": round(calls / b),
                    "scheduler_calls_per_s": round(calls / s),
                    "added_us_per_call": round(added_us, 2),
                    "sync_submit_us": round(sync_plain, 2),
                    "sync_submit_keyed_us": round(sync_keyed, 2),
                    "sync_submit_keyed_digested_us": round(sync_digested, 2),
                    "sync_contended_us": round(sync_busy, 2),
                    "semaphore_contended_us": round(semaphore_busy, 2),
                    **{name: round(us, 2) for name, us in held.items()},
                    **counted,
                },
                "goals": {
                    "scheduler_vs_bare_ratio": {"value": round(ratio, 3), "limit": 2.0, "better": "lower"},
                    **{
                        f"{case}_{large}_over_{small}": {
                            "value": round(value, 3),
                            "limit": 3.0,
                            "better": "lower",
                        }
                        for case, value in held_ratio.items()
                    },
                },
            }
        )
    )


if __name__ == "__main__":
    main()
