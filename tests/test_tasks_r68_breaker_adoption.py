"""Review R68: adopting another process's breaker row does not undo a newer transition of this one.

``_sync_breaker`` checked that this process had made no transition of the key since its read
(``newer_than_known``), then adopted the row: a transition made on another thread between the
check and the adoption was overridden by the older row, until this process's next transition.

A real SQLite store, two connections as two processes have; the other thread's transition is run
to its end between the check and the adoption (joined there), no sleep as synchronisation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.store import open_store
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

KEY = "tool:t"


def _config() -> SchedulerConfig:
    return SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60.0))


async def _fail(attempt: Attempt) -> None:
    raise ConnectionError("down")


def _between_check_and_adoption(scheduler: Scheduler, transition: Callable[[], None]) -> list[bool]:
    """Make ``scheduler``'s next ``newer_than_known`` run ``transition`` on another thread, to
    its end, after answering; the answers are collected in the list returned."""
    check = scheduler.shared.newer_than_known
    answers: list[bool] = []

    def checked(key: str, order: tuple[float, bool], own: int) -> bool:
        answer = check(key, order, own)
        answers.append(answer)
        other = threading.Thread(target=transition)
        other.start()
        other.join()
        return answer

    scheduler.shared.newer_than_known = checked  # type: ignore[method-assign]
    return answers


@pytest.mark.parametrize("row", ["closed", "open"])
async def test_a_transition_between_the_check_and_the_adoption_stands(tmp_path: Path, row: str) -> None:
    """Review R68: another process's row, newer than anything this process knew when it was
    checked, was adopted after this process's breaker changed on another thread: a stale "closed"
    closed the breaker this process had just opened (its calls ran on into a failing backend),
    a stale "open" reopened the breaker its probe had just closed. Now the adoption is skipped
    (the row is read again at the next check), and this process's transition stands."""
    url = str(tmp_path / "agentgate.db")
    mine, theirs = open_store(url), open_store(url)
    scheduler = Scheduler(_config(), store=mine)
    breaker = scheduler.breaker(KEY)
    try:
        if row == "closed":
            SharedBreakers(theirs).publish(KEY, "open", time.time() - 2.0)
            SharedBreakers(theirs).publish(KEY, "closed", time.time() - 1.0)  # their probe succeeded
            answers = _between_check_and_adoption(scheduler, lambda: breaker.record_failure("transient"))
            expected = BreakerState.OPEN
        else:
            with pytest.raises(ConnectionError):  # opened here, its "open" written to the store
                await scheduler.submit(ToolCall("t"), _fail)
            for _ in range(500):  # the store worker writing it: a condition, not a time, is awaited
                if scheduler.shared.own_transitions(KEY) is not None:
                    break
                await asyncio.sleep(0.01)
            assert scheduler.shared.own_transitions(KEY) == 1
            SharedBreakers(theirs).publish(KEY, "open", time.time() + 1.0)
            answers = _between_check_and_adoption(scheduler, breaker.record_success)  # a probe closed it
            expected = BreakerState.CLOSED
        scheduler._breaker_seen.clear()  # read the row now
        await scheduler._sync_breaker(breaker, asyncio.get_running_loop())
        assert answers == [True]  # the row was checked and found newer
        assert breaker.state is expected
    finally:
        await scheduler.aclose()
        mine.close()
        theirs.close()
