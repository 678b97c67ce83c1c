"""Review R65b: a Ctrl-C that lands as a synchronous call is being queued for the only slot, before
the call's thread begins to wait, gives the call up as one landing during the wait does: the slot
(and, with a store, its lease) comes back at once and the next call runs.

Until then, both ways a sync call waits had such a window: with a store (the call handed to the
scheduler's loop, ``_submit_handed``) between queueing the call on the loop and the wait for the
hand-off, and without one (``_admit``) between ``enqueue`` and the wait. The call stayed queued,
took the slot when the holder gave it back, and never ran: the next call waited until
``Gate.close``, and on PostgreSQL the lease stayed live for other processes (found by r65b-flaky
as a rare failure of tests/test_cli_signals.py's Ctrl-C case under load).

The interrupt is made to land in the window by wrapping, in the script, the step just before it
(real signals land there only by chance); the script is tests/test_cli_signals.py's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_signals import ENV, QUEUED, ROOT, _tool_world

HANDED = """
import asyncio, threading, time
_queue_it = asyncio.run_coroutine_threadsafe
armed = [threading.main_thread()]
QUEUED_FLAG = []

def _landing(coro, loop):
    future = _queue_it(coro, loop)
    if armed and threading.current_thread() is armed[0] and threading.active_count() > 2:
        armed.clear()
        end = time.monotonic() + 10
        while not QUEUED_FLAG and time.monotonic() < end:  # the call is in the queue
            time.sleep(0.005)
        raise KeyboardInterrupt  # as the call was queued, before the wait for its hand-off
    return future

asyncio.run_coroutine_threadsafe = _landing
"""

DIRECT = """
import threading
from agentgate.tasks import _sync

class _Landing(set):
    armed = True

    def add(self, wake):
        if _Landing.armed and threading.current_thread() is threading.main_thread():
            _Landing.armed = False
            raise KeyboardInterrupt  # after enqueue, before the wait
        super().add(wake)

_init = _sync.SyncScheduler.__init__

def _init_landing(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self._waiting = _Landing()

_sync.SyncScheduler.__init__ = _init_landing
QUEUED_FLAG = []
"""


def _run(tmp_path: Path, patch: str, url: str) -> str:
    script = patch + QUEUED.replace(
        '    print("queued", flush=True)', '    QUEUED_FLAG.append(1)\n    print("queued", flush=True)'
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *_tool_world(tmp_path), url],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=120,
    )
    assert "interrupted\n" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert "after: ran\n" in done.stdout, (done.stdout, done.stderr[-3000:])
    return done.stdout


@pytest.mark.postgres
def test_ctrl_c_as_a_handed_call_is_queued_gives_the_slot_and_lease_back(
    postgres_url: str, tmp_path: Path
) -> None:
    """Review R65b: with a PostgreSQL store (calls handed to the loop thread), the interrupt
    lands as the call was queued on the loop: the next call runs, no lease is left live."""
    out = _run(tmp_path, HANDED, postgres_url)
    assert "live leases: 0\n" in out, out


def test_ctrl_c_between_enqueue_and_the_wait_gives_the_slot_back(tmp_path: Path) -> None:
    """Review R65b: without a store's hand-off (SQLite), the interrupt lands after the call was
    put in the fair queue, before its thread waits: the next call runs."""
    _run(tmp_path, DIRECT, str(tmp_path / "agentgate.db"))
