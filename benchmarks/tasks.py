"""Scheduler overhead: 20,000 no-op tool calls through agentgate's scheduler vs a bare asyncio baseline.

Both sides run the same work in the same process, one after the other, best of ``--repeat`` runs,
timed in CPU seconds of the process (``time.process_time``: the work is one busy thread, and CPU
time does not count the waits that other programs on a shared machine cause):
every call is a coroutine that yields to the event loop once (``await asyncio.sleep(0)``), so the
concurrency limits really bind and calls really queue.

- bare: ``asyncio.gather`` of all calls, each under ``asyncio.Semaphore(limit)`` of its tool.
- scheduler: ``asyncio.gather`` of ``Scheduler.submit`` for all calls, with the same per-tool
  limits, three priority classes and four tenants (so the fair queue has work to do).

Goal: scheduler time <= 2.0 x bare time. Prints a table, then one JSON line (the last line).

    .venv/bin/python benchmarks/tasks.py [--quick] [--json] [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time

from agentgate.tasks import PriorityClass, Scheduler, SchedulerConfig, ToolCall, ToolLimits

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
    requests = [
        ToolCall(f"tool{i % TOOLS}", tenant=f"tenant{i % TENANTS}", priority=CLASSES[i % 3].name)
        for i in range(calls)
    ]

    async def work(_attempt: object) -> None:
        await _noop()

    start = time.process_time()
    await asyncio.gather(*(scheduler.submit(call, work) for call in requests))
    elapsed = time.process_time() - start
    await scheduler.aclose()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 calls, 2 repeats")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    calls, repeat = (2_000, 2) if args.quick else (args.calls, args.repeat)

    bare_s, sched_s = [], []
    for _ in range(repeat):
        gc.collect()
        bare_s.append(asyncio.run(bare(calls)))
        gc.collect()
        sched_s.append(asyncio.run(scheduled(calls)))
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
                },
                "goals": {
                    "scheduler_vs_bare_ratio": {"value": round(ratio, 3), "limit": 2.0, "better": "lower"}
                },
            }
        )
    )


if __name__ == "__main__":
    main()
