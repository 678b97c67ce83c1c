"""Review R90: a ``SyncScheduler`` with a store runs the core's attempt loop on its loop thread,
and with it the call's own code there: its classifier and its ``pauses`` predicate. An interrupt
raised there (R89's scene: ``KeyboardInterrupt`` in the classifier; a ``SystemExit`` as well)
escaped ``run_forever`` and ended the loop thread: the caller waited for good, past its deadline,
and every later call found no loop. The interrupt now reaches the caller's thread, as it does
without a store; the loop thread goes on, and the half-open probe the attempt held is given back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.store import open_store
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    BreakerPolicy,
    BreakerState,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    from_function,
)

RESET_S = 0.01
CONFIG = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
)
INTERRUPTS = pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
WHERE = pytest.mark.parametrize("where", ["classifier", "pauses"])


class _ProbeDown(ConnectionRefusedError):
    """The probe's failure: the one whose handling is interrupted."""


def _down(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


def _probe_down(attempt: Attempt) -> str:
    raise _ProbeDown("still down")


def _ran(attempt: Attempt) -> str:
    return "ran"


def _in_a_thread(scheduler: SyncScheduler, call: ToolCall, fn: Callable[[Attempt], str]) -> str:
    """What ``submit`` gave a caller's thread within 5 s: its result, the name of what it raised,
    or ``still waiting``."""
    told: list[str] = []

    def caller() -> None:
        try:
            told.append(scheduler.submit(call, fn))
        except BaseException as exc:
            told.append(type(exc).__name__)

    thread = threading.Thread(target=caller, daemon=True)
    thread.start()
    thread.join(5)
    return told[0] if told else "still waiting"


@INTERRUPTS
@WHERE
def test_an_interrupt_in_the_call_s_code_on_the_loop_reaches_its_caller(
    tmp_path: Path, interrupt: type[BaseException], where: str
) -> None:
    def interrupted_on_the_probe(error: BaseException) -> str | None:
        if isinstance(error, _ProbeDown):
            raise interrupt
        return None

    def interrupted_pause(error: BaseException) -> bool:
        return interrupted_on_the_probe(error) is not None

    classifier = from_function(interrupted_on_the_probe) | DEFAULT_CLASSIFIER
    pauses = None
    if where == "pauses":
        classifier = DEFAULT_CLASSIFIER
        pauses = interrupted_pause
    scheduler = SyncScheduler(CONFIG, store=open_store(str(tmp_path / "s.db")), classifier=classifier)
    try:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t", {}), _down)  # opens the breaker
        time.sleep(RESET_S * 2)  # half open: the next call is its probe
        # A deadline from now, well inside the 5 s the caller is waited for: one set before the
        # store was opened could pass on a loaded machine before the probe started.
        probe = ToolCall("t", {}, deadline=time.time() + 4, pauses=pauses)
        assert _in_a_thread(scheduler, probe, _probe_down) == interrupt.__name__  # was still waiting
        assert scheduler._thread.is_alive()
        # The probe came back before its caller was told (R90b: its claim across processes could
        # still be on its way, and this call was refused with CircuitOpen).
        assert _in_a_thread(scheduler, ToolCall("t", {}), _ran) == "ran"
        assert scheduler.breakers()[0].state is BreakerState.CLOSED
    finally:
        scheduler.close(timeout_s=5)
