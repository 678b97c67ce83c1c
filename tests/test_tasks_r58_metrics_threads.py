"""Review R58: the scheduler's counts, bumped from any thread.

Real schedulers, real breakers and real threads; the counts must be exact.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from agentgate.tasks import BreakerPolicy, Scheduler, SchedulerConfig
from agentgate.tasks._metrics import MAX_LABEL_VALUES, OTHER

THREADS = 4
FLIPS = 400
ROUNDS = 8  # each round starts the threads together again: the race shows in some rounds only


@pytest.fixture
def fine_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, so an unguarded count loses updates."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _flip(scheduler: Scheduler, keys: list[str], start: threading.Barrier) -> None:
    breakers = [scheduler.shared.breaker(key) for key in keys]
    start.wait()
    for _ in range(FLIPS):
        for breaker in breakers:
            breaker.record_failure("transient")  # failure_threshold 1: opens
            breaker.record_success()  # closes


@pytest.mark.usefixtures("fine_switching")
def test_breaker_transitions_made_on_many_threads_are_each_counted() -> None:
    """Review R58: a breaker transition made on another thread bumped the scheduler's counts
    without a lock; transitions of several breakers counted under one label (``_other``, past
    the bound) on several threads at once lost counts."""
    for _ in range(ROUNDS):
        scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)))
        for i in range(MAX_LABEL_VALUES):  # every label taken: each breaker key below counts as _other
            scheduler.metrics.tally("started", f"t{i}")
        start = threading.Barrier(THREADS)
        threads = [
            threading.Thread(target=_flip, args=(scheduler, [f"k{n}.{j}" for j in range(2)], start))
            for n in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expected = THREADS * 2 * FLIPS
        assert scheduler.metrics.count("breaker_opened", OTHER) == expected
        assert scheduler.metrics.count("breaker_closed", OTHER) == expected
