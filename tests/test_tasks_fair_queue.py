"""The fair queue's fast dispatch (one open tool, no tenant or agent limits) serves exactly the
calls, in exactly the order, that its general walk of the tree serves."""

from __future__ import annotations

import random

import pytest

from agentgate.tasks import _fair
from agentgate.tasks._fair import Entry, FairQueue


def _never(*_keys: str) -> bool:
    """A tenant / agent predicate that blocks nothing: it makes ``pop`` take its general walk."""
    return False


def _run(seed: int, *, general: bool) -> list[object]:
    rng = random.Random(seed)
    queue: FairQueue[tuple[int, str]] = FairQueue()
    waiting: list[Entry[tuple[int, str]]] = []
    popped: list[object] = []
    classes = [("x", 0, 1.0), ("y", 0, 2.0), ("z", 1, 1.0)]
    for step in range(3000):
        roll = rng.random()
        if roll < 0.55:
            agent, tenant = f"p{rng.randrange(60)}", rng.randrange(5)
            name, rank, weight = rng.choice(classes)
            entry = queue.push(
                (step, agent), rank, name, weight, f"t{tenant}", 1.0 + tenant % 3, agent, rng.choice("abc")
            )
            waiting.append(entry)
        elif roll < 0.65 and waiting:
            queue.discard(waiting.pop(rng.randrange(len(waiting))))  # a deadline or a cancellation
        else:
            tool = rng.choice("abcd")  # "d": no call waits for it
            if general:
                popped.append(queue.pop({tool}, _never, _never))
            else:
                popped.append(queue.pop({tool}, None, None))
    return popped


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("heap_at", [2, 32, 10**9])
def test_one_open_tool_without_limits_pops_what_the_general_walk_pops(
    seed: int, heap_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classes of two ranks, weighted tenants, up to 60 agents, calls leaving the queue early; with
    heaps from 2 waiting children on, from 32 on (the default) and never."""
    monkeypatch.setattr(_fair, "_HEAP_AT", heap_at)
    monkeypatch.setattr(_fair, "_HEAP_OFF", min(heap_at, 8))
    fast = _run(seed, general=False)
    assert fast == _run(seed, general=True)
    assert sum(item is not None for item in fast) > 500
    assert None in fast  # and a tool nobody waits for pops nothing
