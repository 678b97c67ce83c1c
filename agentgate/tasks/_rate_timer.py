"""The rate timer (``_RateTimer``, a part of ``SharedLimits``).

Rate-limited waiting calls are started by one timer thread (made on first use, joined by
``close``) that sleeps until the earliest token and then dispatches under the lock.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentgate.tasks._limits import SharedLimits

_LONGEST_TIMER_WAIT_S = 86_400.0
_NEVER = float("inf")


class _RateTimer:
    """Arm the timer thread (``_arm``, lock held) and stop it (``close``)."""

    # The limits' state this part reads (``SharedLimits.__init__`` sets it).
    lock: threading.Lock
    _timer_at: float
    _timer_wake: threading.Condition
    _timer: threading.Thread | None
    _stopped: bool
    polling_closed: bool

    if TYPE_CHECKING:  # what this part calls of the limits' other parts

        def dispatch(self, tool: str | None = None) -> None: ...

        def poll_closed(self) -> None: ...

    def _arm(self, at: float) -> None:
        """Have the timer thread dispatch at ``at`` (monotonic) unless it will sooner (lock held)."""
        if self._stopped or at >= self._timer_at:
            return
        self._timer_at = at
        if self._timer is None:
            # The thread holds these limits weakly: limits dropped without ``close`` (a scheduler
            # made per job and never closed) end their timer thread instead of leaking it.
            self._timer = threading.Thread(
                target=_run_timer,
                args=(weakref.ref(self), self.lock, self._timer_wake),
                name="agentgate-rate-timer",
                daemon=True,
            )
            self._timer.start()
            finalizer = weakref.finalize(self, _wake_timer, self._timer_wake, self._timer)
            finalizer.atexit = False  # type: ignore[misc]  # a documented attribute the stubs miss
        else:
            self._timer_wake.notify()

    def close(self) -> None:
        """Stop and join the rate timer thread; waiting rate-limited calls then start only when a slot comes free."""
        with self.lock:
            self._stopped = True
            self._timer_wake.notify()
            timer = self._timer
        if timer is not None and timer is not threading.current_thread():
            timer.join()


def _run_timer(ref: weakref.ref[SharedLimits], lock: threading.Lock, wake: threading.Condition) -> None:
    """The rate timer thread of the limits ``ref`` names: dispatch when the next token is due,
    until they are closed or collected."""
    with lock:
        while (limits := ref()) is not None and not limits._stopped:
            delay = limits._timer_at - time.monotonic()
            if delay <= 0:
                limits._timer_at = _NEVER
                if limits.polling_closed:  # calls wait that a loop closed under its call may hold
                    limits.poll_closed()
                limits.dispatch()
                continue
            # At most a day at once: a lock cannot wait longer (a token due in 1e300 s)
            timeout = None if limits._timer_at == _NEVER else min(delay, _LONGEST_TIMER_WAIT_S)
            del limits  # not held while waiting, so that the limits can be collected
            if ref() is None:
                return
            wake.wait(timeout)


def _wake_timer(wake: threading.Condition, timer: threading.Thread) -> None:
    """Wake the timer thread of limits that were collected, so that it ends. Not from that
    thread itself: it holds the lock then, and checks for itself before it waits."""
    if timer is not threading.current_thread():
        with wake:
            wake.notify()
