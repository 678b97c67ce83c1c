"""Router line: what calls waiting for a slot cost the calls that free and take slots.

Another model: one engine serves model ``big`` (``max_concurrency`` 1, held by one call) and
another serves ``small`` (64 slots). ``--waiting`` calls of class 1 wait in the router's line for
``big``; then ``--calls`` calls of ``small`` are each routed (dispatched at once), finished, and
the router asked which waiters the freed slot goes to (``due``, as the dispatcher asks on every
finished call).

Many sets of backends: 32 engines of one model (``max_concurrency`` 1 each, all held), and
``--waiting`` calls of class 1 in line, each allowed a random half of the engines (its own
``allowed``: about as many sets of backends as waiters). Then ``--calls`` times a slot frees on
one engine (in turn), the router is asked whom it goes to (``due``: the first waiter allowed
there), and a call of class 0, ranked ahead of the line, is routed and takes it.

Waiters taking the slots: the same 32 engines and line, but the slot that frees is taken by the
waiter ``due`` names, which asks again and is dispatched (so it leaves the line: ``withdraw``,
in the queue of every backend it may use), and a new waiter joins the back of the line, so that
its length stays. Against: the same with 32 waiting.

Waiters turning down their slot: one engine (``max_concurrency`` 1, held) and ``--waiting`` calls
of class 1 in line whose SLO no slot meets (the predictor says 3 s, their SLO is 3.2 s), then one
whose SLO it meets; the slot frees and each of the first asks again and turns it down. Then
``--calls`` times one of them (in turn) asks again, turns the slot down again, and the router is
asked whom it goes to (``due``, as the dispatcher asks when a call turns its slot down: the one at
the back). Against: the same with one such waiter. Until a regression review of R92 they stayed
in the queues, and each ask and each ``due`` walked past every one ahead.

Each figure is the time per call, the median of ``--repeat`` rounds; in each round the line
full and the line empty (or short) are measured one after the other, in turns (empty first in
one round, full first in the next), so that neither is measured only in a colder process.

Goals: with the line full, a call of the other model costs at most 2.0 x a call with nobody waiting
(``waiting_over_empty``), and so does a freed slot among waiters with many sets of backends
(``allowed_sets_over_empty``) and a slot taken by a waiter of the line
(``taken_from_line_over_short``), and an ask of a waiter turning down its slot, with ``due``
(``declined_over_one``). Until review R91 the router walked every waiter ahead that could
use none of the free slots, and each call of the other model cost time in proportion to the line:
3.5 ms at 1,000 waiting, 33 ms at 8,000, against 0.03 ms with nobody waiting (about 1,000 x).
Until a regression review of R91 the walk cost a step for every set of backends waiters may use:
a freed slot took 4.9 ms with 1,000 waiting, each allowed a random half of 32 engines, 54 ms with
5,000, where the router before R91 took 0.3 ms. Until a second regression review of R91 the empty
line was measured first, best of the runs, and the full one after: the ratio (0.87x) came from
that order, not from the router; and no waiter of the line took a slot, so leaving the line was
not timed.

    .venv/bin/python benchmarks/router_line.py [--quick] [--json] [--waiting N] [--calls N] [--repeat R]

``--quick`` keeps 2,000 waiting and 2 repeats where ``--waiting`` and ``--repeat`` name none.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's agentgate, not an installed one

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Backend
from agentgate.dispatch.router import AllowedBackend, Router, RouteRequest
from agentgate.dispatch.scorers import Scorer
from agentgate.dispatch.state import BackendState
from benchmarks._args import whole_up_to

MAX_WAITING = 1_000_000
"""The most ``--waiting`` taken: each waiter is held in memory (a few hundred bytes)."""

MAX_CALLS = 1_000_000
"""The most ``--calls`` taken."""

MAX_REPEAT = 1_000
"""The most ``--repeat`` taken."""

GOAL = 2.0
"""The most a call of the other model, or a freed slot, may cost with the line full, over with it
empty."""

ENGINES = 32
"""The engines of the case with many sets of backends; each waiter is allowed half of them."""

SHORT = 32
"""The waiters in line that a slot taken from a long line is compared with."""


def _call(name: str, model: str) -> RouteRequest:
    return RouteRequest(id=name, model=model, prompt_tokens=10, slo_ttft_s=3600.0, arrived_at=0.0)


def per_call_s(waiting: int, calls: int) -> float:
    """Seconds per call of ``small`` with ``waiting`` calls in line for ``big`` (all at one
    instant: no waiter leaves the line for having stopped asking)."""
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "big0", "url": "http://127.0.0.1:9000", "models": ["big"], "max_concurrency": 1},
                {
                    "name": "small0",
                    "url": "http://127.0.0.1:9001",
                    "models": ["small"],
                    "max_concurrency": 64,
                },
            ]
        }
    )
    router = Router(inventory)
    if router.route(_call("holder", "big"), 0.0).action != "dispatch":
        raise SystemExit("router_line: the holder of big's slot was not dispatched")
    for i in range(waiting):
        if router.route(_call(f"w{i}", "big"), 0.0).action != "wait":
            raise SystemExit(f"router_line: waiter {i} for big was not put in line")
    names = [f"s{j}" for j in range(calls)]
    gc.collect()
    started = time.perf_counter()
    for name in names:
        router.route(_call(name, "small"), 0.0)
        router.finished(name, 0.0)
        router.due(0.0)
    return (time.perf_counter() - started) / calls


def _within(names: frozenset[str]) -> AllowedBackend:
    """An ``allowed`` that admits the backends named ``names``."""

    def allowed(backend: Backend) -> bool:
        return backend.name in names

    return allowed


def _half(rng: random.Random) -> AllowedBackend:
    """An ``allowed`` that admits a random half of the ``ENGINES`` engines."""
    return _within(frozenset(f"e{k}" for k in rng.sample(range(ENGINES), ENGINES // 2)))


def per_slot_s(waiting: int, calls: int) -> float:
    """Seconds per freed slot (finished, ``due``, taken by a call of class 0) with ``waiting``
    calls in line, each allowed a random half of ``ENGINES`` engines (all at one instant)."""
    router = _engines(ENGINES)
    holders = _held(router)
    rng = random.Random(1)
    for i in range(waiting):
        if router.route(_call(f"w{i}", "m"), 0.0, _half(rng)).action != "wait":
            raise SystemExit(f"router_line: waiter {i} was not put in line")
    takers = [
        RouteRequest(id=f"t{j}", model="m", prompt_tokens=10, priority=0, slo_ttft_s=3600.0, arrived_at=0.0)
        for j in range(calls)
    ]
    gc.collect()
    started = time.perf_counter()
    for j, taker in enumerate(takers):
        engine = j % ENGINES
        router.finished(holders[engine], 0.0)
        router.due(0.0)
        router.route(taker, 0.0)
        holders[engine] = taker.id
    elapsed = time.perf_counter() - started
    if any(router.in_flight(f"e{i}") != 1 for i in range(ENGINES)):
        raise SystemExit("router_line: a call of class 0 did not take the slot that freed")
    return elapsed / calls


def _engines(count: int, predictor: Scorer | None = None) -> Router:
    """A router over ``count`` engines of model ``m``, ``max_concurrency`` 1 each."""
    return Router(
        inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": f"e{i}",
                        "url": f"http://127.0.0.1:{9000 + i}",
                        "models": ["m"],
                        "max_concurrency": 1,
                    }
                    for i in range(count)
                ]
            }
        ),
        predictor=predictor,
    )


def _held(router: Router) -> list[str]:
    """The calls routed to hold the one slot of each of ``ENGINES`` engines, ``h{i}`` on ``e{i}``."""
    holders = [f"h{i}" for i in range(ENGINES)]
    for i, holder in enumerate(holders):
        if router.route(_call(holder, "m"), 0.0, _within(frozenset({f"e{i}"}))).backend != f"e{i}":
            raise SystemExit(f"router_line: the holder of e{i}'s slot was not dispatched there")
    return holders


def per_taken_s(waiting: int, calls: int) -> float:
    """Seconds per slot taken by a waiter of the line (finished, ``due``, the waiter it names
    asks again and is dispatched, a new waiter joins the back) with ``waiting`` calls in line,
    each allowed a random half of ``ENGINES`` engines (all at one instant)."""
    router = _engines(ENGINES)
    holders = _held(router)
    rng = random.Random(2)
    rules: dict[str, AllowedBackend] = {}
    calls_of: dict[str, RouteRequest] = {}

    def join(name: str) -> None:
        rules[name] = _half(rng)
        calls_of[name] = _call(name, "m")
        if router.route(calls_of[name], 0.0, rules[name]).action != "wait":
            raise SystemExit(f"router_line: waiter {name} was not put in line")

    for i in range(waiting):
        join(f"w{i}")
    joining = [f"n{j}" for j in range(calls)]
    for name in joining:  # their ``allowed`` drawn before the clock starts
        rules[name] = _half(rng)
        calls_of[name] = _call(name, "m")
    gc.collect()
    started = time.perf_counter()
    for j, name in enumerate(joining):
        engine = j % ENGINES
        router.finished(holders[engine], 0.0)
        (taker,) = router.due(0.0)
        plan = router.route(calls_of[taker], 0.0, rules[taker])
        if plan.backend is None:
            raise SystemExit(f"router_line: waiter {taker}, named by due, was not dispatched")
        holders[int(plan.backend[1:])] = taker
        router.route(calls_of[name], 0.0, rules[name])
    elapsed = time.perf_counter() - started
    if len(router._waiters) != waiting:
        raise SystemExit("router_line: the line did not keep its length")
    return elapsed / calls


class _DeclinedSlow(Scorer):
    """Predicts 3 s to first token for the calls whose id starts with ``d``, else none."""

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        return 3.0 if request.id.startswith("d") else 0.0


def _declining(name: str) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, priority=1, slo_ttft_s=3.2, arrived_at=0.0)


def per_declined_s(waiting: int, calls: int) -> float:
    """Seconds per ask of a waiter turning down its slot, with ``due`` after it, with ``waiting``
    such waiters ahead of one that would take it (all asked at one instant)."""
    router = _engines(1, _DeclinedSlow())
    if router.route(_call("holder", "m"), 0.0).action != "dispatch":
        raise SystemExit("router_line: the holder of the slot was not dispatched")
    asks = [_declining(f"d{i}") for i in range(waiting)]
    for ask in asks:
        if not router.route(ask, 0.0).until_freed:
            raise SystemExit(f"router_line: waiter {ask.id} was not put in line")
    if not router.route(_call("back", "m"), 0.0).until_freed:
        raise SystemExit("router_line: the waiter at the back was not put in line")
    router.finished("holder", 0.5)
    for ask in asks:
        router.route(ask, 0.5)  # each turns the slot down
    gc.collect()
    started = time.perf_counter()
    for j in range(calls):
        router.route(asks[j % waiting], 0.5)
        router.due(0.5)
    elapsed = time.perf_counter() - started
    if router.due(0.5) != ["back"]:
        raise SystemExit("router_line: the slot turned down did not go to the waiter at the back")
    return elapsed / calls


def _paired(
    measure: Callable[[int, int], float], short: int, long: int, calls: int, rounds: int
) -> tuple[float, float]:
    """The median seconds per call of ``measure`` with ``short`` and with ``long`` waiting, over
    ``rounds`` rounds that measure both, in turns (short first in one round, long first in the
    next)."""
    shorts: list[float] = []
    longs: list[float] = []
    for i in range(rounds):
        if i % 2:
            longs.append(measure(long, calls))
            shorts.append(measure(short, calls))
        else:
            shorts.append(measure(short, calls))
            longs.append(measure(long, calls))
    return statistics.median(shorts), statistics.median(longs)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 waiting, 2 repeats, where not given")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    parser.add_argument(
        "--waiting",
        type=whole_up_to(1, MAX_WAITING, "waiters held in memory"),
        default=None,
        help=f"calls in line for the full model, 1 to {MAX_WAITING:,}, default 8,000 (--quick: 2,000)",
    )
    parser.add_argument(
        "--calls",
        type=whole_up_to(1, MAX_CALLS, "calls of the other model"),
        default=2_000,
        help=f"calls of the other model timed, 1 to {MAX_CALLS:,}, default 2,000",
    )
    parser.add_argument(
        "--repeat",
        type=whole_up_to(1, MAX_REPEAT, "runs of every figure"),
        default=None,
        help=f"1 to {MAX_REPEAT:,}, default 5 (--quick: 2)",
    )
    args = parser.parse_args(argv)
    waiting = args.waiting if args.waiting is not None else 2_000 if args.quick else 8_000
    repeat = args.repeat if args.repeat is not None else 2 if args.quick else 5

    empty, full = _paired(per_call_s, 0, waiting, args.calls, repeat)
    ratio = full / empty
    slot_empty, slot_full = _paired(per_slot_s, 0, waiting, args.calls, repeat)
    slot_ratio = slot_full / slot_empty
    taken_short, taken_long = _paired(per_taken_s, SHORT, waiting, args.calls, repeat)
    taken_ratio = taken_long / taken_short
    declined_one, declined_full = _paired(per_declined_s, 1, waiting, args.calls, repeat)
    declined_ratio = declined_full / declined_one
    print(f"{'calls of small, per call (median of ' + str(repeat) + ')':<50} {'us':>10}")
    print(f"{'nobody waiting for big':<50} {empty * 1e6:>10.2f}")
    print(f"{f'{waiting:,} waiting for big':<50} {full * 1e6:>10.2f}")
    print(f"{'ratio (goal <= ' + str(GOAL) + ')':<50} {ratio:>10.2f}")
    print(f"{f'freed slots of {ENGINES} engines, per slot (median of {repeat})':<50} {'us':>10}")
    print(f"{'nobody waiting':<50} {slot_empty * 1e6:>10.2f}")
    print(f"{f'{waiting:,} waiting, each allowed {ENGINES // 2} engines':<50} {slot_full * 1e6:>10.2f}")
    print(f"{'ratio (goal <= ' + str(GOAL) + ')':<50} {slot_ratio:>10.2f}")
    print(f"{f'slots taken by waiters of the line (median of {repeat})':<50} {'us':>10}")
    print(f"{f'{SHORT} waiting':<50} {taken_short * 1e6:>10.2f}")
    print(f"{f'{waiting:,} waiting':<50} {taken_long * 1e6:>10.2f}")
    print(f"{'ratio (goal <= ' + str(GOAL) + ')':<50} {taken_ratio:>10.2f}")
    print(f"{f'asks turning the slot down, + due (median of {repeat})':<50} {'us':>10}")
    print(f"{'1 such waiting':<50} {declined_one * 1e6:>10.2f}")
    print(f"{f'{waiting:,} such waiting':<50} {declined_full * 1e6:>10.2f}")
    print(f"{'ratio (goal <= ' + str(GOAL) + ')':<50} {declined_ratio:>10.2f}")
    figures = {
        "waiting": waiting,
        "calls": args.calls,
        "repeat": repeat,
        "empty_line_per_call_us": round(empty * 1e6, 3),
        "full_line_per_call_us": round(full * 1e6, 3),
        "allowed_sets_engines": ENGINES,
        "allowed_sets_empty_per_slot_us": round(slot_empty * 1e6, 3),
        "allowed_sets_full_per_slot_us": round(slot_full * 1e6, 3),
        "taken_from_line_short": SHORT,
        "taken_from_line_short_per_slot_us": round(taken_short * 1e6, 3),
        "taken_from_line_full_per_slot_us": round(taken_long * 1e6, 3),
        "declined_one_per_ask_us": round(declined_one * 1e6, 3),
        "declined_full_per_ask_us": round(declined_full * 1e6, 3),
    }
    goals = {
        "waiting_over_empty": {"value": round(ratio, 3), "limit": GOAL, "better": "lower"},
        "allowed_sets_over_empty": {"value": round(slot_ratio, 3), "limit": GOAL, "better": "lower"},
        "taken_from_line_over_short": {"value": round(taken_ratio, 3), "limit": GOAL, "better": "lower"},
        "declined_over_one": {"value": round(declined_ratio, 3), "limit": GOAL, "better": "lower"},
    }
    print(json.dumps({"benchmark": "router_line", "figures": figures, "goals": goals}))


if __name__ == "__main__":
    main()
