"""Review R70: once ``Gate.close``'s last commit of outcomes was interrupted (Ctrl-C), what it did
next (``Gate._close_store``: log the outcomes lost, close the grant store's connection, close the
store) ran step by step with nothing around it: a second Ctrl-C as it logged the loss (a person
pressing again while a slow handler writes) left the store open, and a second ``close()`` did
nothing (the gate was closing already)."""

from __future__ import annotations

import _thread
import logging
import threading
from pathlib import Path

import pytest
from _raw_sqlite import opened
from test_observability import Sweep
from test_observability_r70_close_spans import CTRL_C_AT_CLOSE

from agentgate.capabilities import Call
from agentgate.errors import StoreError


class _SecondCtrlC(logging.Handler):
    """A log handler during whose write of the loss a person presses Ctrl-C again."""

    def emit(self, record: logging.LogRecord) -> None:
        if "outcomes not recorded" in record.getMessage():
            raise KeyboardInterrupt


def test_a_second_ctrl_c_as_close_logs_the_outcomes_lost_still_closes_the_store(
    tmp_path: Path, default_sigint: None
) -> None:
    """Review R70: Ctrl-C in ``close``'s last commit, then again as it logged the outcomes lost:
    the second ``KeyboardInterrupt`` left ``close`` before the store was closed, and nothing
    closed it later. Now the store is closed whatever that step raises, and the second
    interruption leaves ``close`` (the first is its context)."""
    sweep = Sweep(tmp_path)
    with opened(tmp_path / "agentgate.db") as db:
        db.executescript(CTRL_C_AT_CLOSE)
    for conn in list(sweep.gate.store._made):  # type: ignore[attr-defined]
        conn.create_function(
            "on_main_thread", 0, lambda: threading.current_thread() is threading.main_thread()
        )
        conn.create_function("ctrl_c", 0, _thread.interrupt_main)
    auth = sweep.gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed and auth.reservations
    sweep.gate.run(auth, lambda: "answer")
    handler = _SecondCtrlC()
    logger = logging.getLogger("agentgate.gate")
    logger.addHandler(handler)
    try:
        with pytest.raises(KeyboardInterrupt) as second:
            sweep.gate.close()
    finally:
        logger.removeHandler(handler)
    assert isinstance(second.value.__context__, KeyboardInterrupt)  # the first, in the commit
    sweep.gate.close()  # nothing more to do
    with pytest.raises(StoreError, match="closed"):
        sweep.gate.store.query("SELECT 1")
