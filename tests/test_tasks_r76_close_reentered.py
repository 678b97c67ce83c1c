"""Review R76: ``SyncScheduler.close()`` re-entered in the thread that closes (a signal handler)
with ``drain=False`` while the first close waits for its drain on the loop: the second cancels
that drain and closes the scheduler, and the first then returns. It raised
``concurrent.futures.CancelledError`` (no agentgate error) from waiting on the drain the second
had cancelled, although the scheduler was closed.

A real scheduler on a real SQLite store (a call's attempt is handed to its caller's thread, so
the drain waits on the loop), a real signal sent to the test's own thread.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

from agentgate.store import Store
from agentgate.tasks import SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

WAIT_S = 10.0
CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


def test_a_close_re_entered_with_drain_false_while_the_first_drains_ends_both(sqlite_store: Store) -> None:
    scheduler = SyncScheduler(CONFIG, store=sqlite_store)
    running, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def held(_attempt: object) -> str:
        running.set()
        release.wait(WAIT_S)
        return "ran"

    def call() -> None:
        try:
            outcome.append(scheduler.submit(ToolCall("t"), held))
        except Exception as exc:  # what the caller got, to assert on
            outcome.append(type(exc).__name__)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert running.wait(WAIT_S)
    closing = threading.get_ident()
    second: list[object] = []

    def close_at_once(signum: int, frame: FrameType | None) -> None:
        scheduler.close(drain=False)
        second.append("returned")

    def interrupt_the_drain() -> None:
        deadline = time.monotonic() + WAIT_S
        while scheduler._aclosing is None and time.monotonic() < deadline:
            time.sleep(0.001)
        # Most likely the first close waits on the drain by now; if not, the handler runs as it
        # begins to, and the drain it then waits on is cancelled already: the same path.
        time.sleep(0.05)
        signal.pthread_kill(closing, signal.SIGUSR1)

    before = signal.signal(signal.SIGUSR1, close_at_once)
    try:
        interrupter = threading.Thread(target=interrupt_the_drain, daemon=True)
        interrupter.start()
        scheduler.close()  # until review R76: concurrent.futures.CancelledError
        interrupter.join(WAIT_S)
    finally:
        signal.signal(signal.SIGUSR1, before)
        release.set()
    assert second == ["returned"]
    assert scheduler._loop.is_closed()
    caller.join(WAIT_S)
    assert not caller.is_alive()
    assert outcome == ["ran"], outcome  # a sync tool already running finishes (close, documented)
