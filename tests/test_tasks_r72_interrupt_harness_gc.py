"""The interrupt harness of ``test_tasks_r66_interrupt_in_enqueue`` leaves the garbage collector
as it found it."""

from __future__ import annotations

import gc

from test_tasks_r66_interrupt_in_enqueue import _submit_interrupted

from agentgate.tasks import SyncScheduler, ToolCall


def test_the_interrupt_harness_leaves_a_switched_off_collector_off() -> None:
    """Review R72: ``_submit_interrupted`` switched the collector off while armed and then on
    unconditionally: a caller that had it off (a test measuring without collections) found it
    on afterwards, and every later test in that worker process ran with it as changed."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with SyncScheduler() as scheduler:
            interrupted, _ = _submit_interrupted(scheduler, ToolCall("t"), 10**9)  # never reached
        assert not interrupted
        assert not gc.isenabled()
    finally:
        if collecting:
            gc.enable()
