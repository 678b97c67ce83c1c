"""Review R70: Ctrl-C while ``Gate.close`` waits for the calls in progress to settle (up to its
``timeout_s``, 30 s by default: where a person waiting for a program to stop presses it) left
``close`` before any of its work: the scheduler and dispatcher threads ran on, the store stayed
open, and since the gate was marked closing, a second ``close()`` returned at once, doing none of
it either."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.errors import StoreError
from agentgate.gate._gate import _OPEN_GATES


def test_ctrl_c_while_close_waits_for_a_running_call_still_closes_the_gate(
    tmp_path: Path, default_sigint: None
) -> None:
    """Review R70: Ctrl-C during ``close``'s wait for a running call escaped before the store was
    closed, and the second ``close()`` did nothing (the gate was already closing): the store
    stayed open. Now the interruption ends the wait as its timeout does, the gate closes (the
    store too), and ``close`` raises it then."""
    sweep = Sweep(tmp_path)
    gate = sweep.gate
    auth = gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed
    running, release = threading.Event(), threading.Event()

    def tool() -> str:
        running.set()
        release.wait(30)
        return "answer"

    caller = threading.Thread(target=gate.run, args=(auth, tool))
    caller.start()
    assert running.wait(10)
    main = threading.main_thread().ident
    assert main is not None

    def press_ctrl_c() -> None:  # once close() waits for the running call
        for _ in range(1000):
            if gate._runs_changed._waiters:  # type: ignore[attr-defined]  # threading.Condition's
                break
            threading.Event().wait(0.01)
        signal.pthread_kill(main, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            gate.close(timeout_s=60)
    finally:
        presser.join()
        release.set()
        caller.join(10)
    gate.close()  # idempotent: nothing more to do, nothing raised
    with pytest.raises(StoreError, match="closed"):
        gate.store.query("SELECT 1")
    assert gate not in _OPEN_GATES
