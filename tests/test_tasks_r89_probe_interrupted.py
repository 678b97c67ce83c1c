"""Review R89: a Ctrl-C (any interrupt) that landed while a failed half-open probe was being
handled (in ``_failed``: the classifier, the call's ``pauses`` predicate) kept the probe for good.
The attempt loops had handed the probe to ``_failed``, and their handler for interrupts does not
see an exception raised inside their sibling handler for errors: the breaker stayed half open
with every probe taken and refused every later call with ``CircuitOpen``, whatever the time.
The probe now goes back, as it does when the tool itself is interrupted (docs/tasks.md, "Sync
callers"), in the async core and the sync facade alike."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    BreakerPolicy,
    BreakerState,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    from_function,
)

RESET_S = 0.01
CONFIG = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
)
WHERE = pytest.mark.parametrize("where", ["classifier", "pauses"])


class _ProbeDown(ConnectionRefusedError):
    """The probe's failure: the one handled under a Ctrl-C."""


def _interrupted_on_the_probe(error: BaseException) -> str | None:
    if isinstance(error, _ProbeDown):
        raise KeyboardInterrupt
    return None


CLASSIFIER = from_function(_interrupted_on_the_probe) | DEFAULT_CLASSIFIER


def _probe(where: str) -> ToolCall:
    if where == "pauses":
        return ToolCall("t", {}, pauses=lambda error: _interrupted_on_the_probe(error) is not None)
    return ToolCall("t", {})


def _down(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


def _probe_down(attempt: Attempt) -> str:
    raise _ProbeDown("still down")


def _ran(attempt: Attempt) -> str:
    return "ran"


@WHERE
def test_a_probe_interrupted_while_its_failure_is_handled_is_given_back_in_threads(where: str) -> None:
    classifier = CLASSIFIER if where == "classifier" else DEFAULT_CLASSIFIER
    with SyncScheduler(CONFIG, classifier=classifier) as scheduler:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t", {}), _down)  # opens the breaker
        time.sleep(RESET_S * 2)  # half open
        with pytest.raises(KeyboardInterrupt):
            scheduler.submit(_probe(where), _probe_down)
        assert scheduler.breakers()[0].state is BreakerState.HALF_OPEN
        assert scheduler.submit(ToolCall("t", {}), _ran) == "ran"  # was CircuitOpen for good
        assert scheduler.breakers()[0].state is BreakerState.CLOSED


@WHERE
def test_a_probe_interrupted_while_its_failure_is_handled_is_given_back(where: str) -> None:
    classifier = CLASSIFIER if where == "classifier" else DEFAULT_CLASSIFIER
    scheduler = Scheduler(CONFIG, classifier=classifier)

    async def opened_then_probed() -> None:
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("t", {}), _async(_down))
        await asyncio.sleep(RESET_S * 2)
        await scheduler.submit(_probe(where), _async(_probe_down))

    async def later() -> str:
        try:
            return await scheduler.submit(ToolCall("t", {}), _async(_ran))
        finally:
            await scheduler.aclose()

    # An interrupt leaves its event loop: the later call runs on a loop of its own, as after a Ctrl-C.
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(opened_then_probed())
    assert scheduler.breakers()[0].state is BreakerState.HALF_OPEN
    assert asyncio.run(later()) == "ran"
    assert scheduler.breakers()[0].state is BreakerState.CLOSED


def _async(fn: Callable[[Attempt], str]) -> Callable[[Attempt], Awaitable[str]]:
    async def tool(attempt: Attempt) -> str:
        return fn(attempt)

    return tool
