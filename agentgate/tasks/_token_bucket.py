"""Token bucket: ``burst`` calls at once, ``rate`` calls per second on average.

The bucket holds up to ``burst`` tokens and starts full. Tokens accrue continuously at ``rate``
per second; a call takes one. Instead of a timer that adds tokens, the level is brought up to
date lazily whenever the bucket is asked: ``level = min(burst, level + (now - last) * rate)``,
with time that ran backwards (a wall clock given as ``clock`` and stepped back) counted as none.
``wait_s`` says how long until one token is there, which the scheduler uses to set one timer for
the earliest rate-limited call rather than polling.

Written here rather than taken from aiolimiter because the scheduler must ask "is there a token
*now*" without waiting (it skips rate-limited calls and serves others), from both its async core
and the cross-process path, and aiolimiter only offers an awaitable ``acquire``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from agentgate._shown import quoted
from agentgate.errors import InputError
from agentgate.tasks._config import MAX_BURST


class TokenBucket:
    """A token bucket; not thread-safe (the scheduler touches it from its event loop only)."""

    __slots__ = ("_clock", "_last", "_level", "burst", "rate")

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        rate_ok = not isinstance(rate, bool) and isinstance(rate, int | float) and 0 < rate < math.inf
        burst_ok = not isinstance(burst, bool) and isinstance(burst, int) and 1 <= burst <= MAX_BURST
        if rate_ok and isinstance(rate, int):
            try:  # an integer no float holds: the first refill raised OverflowError
                float(rate)
            except OverflowError:
                rate_ok = False
        if not (rate_ok and burst_ok):  # a NaN rate never grants a token; an infinite one, NaN levels
            raise InputError(
                "a token bucket needs a finite rate > 0 and an integer burst from 1 to 2**53, "
                f"got rate={quoted(rate)}, burst={quoted(burst)}"
            )
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._level = float(burst)
        self._last = clock()

    def _refill(self) -> float:
        now = self._clock()
        # No refill for a clock that went back (a wall clock given as ``clock``, stepped back):
        # counted as negative time, it drained tokens and left the bucket empty for as long as the step.
        self._level = min(float(self.burst), self._level + max(0.0, now - self._last) * self.rate)
        self._last = now
        return self._level

    def try_take(self) -> bool:
        """Take one token if there is one now; True when taken."""
        if self._refill() >= 1.0:
            self._level -= 1.0
            return True
        return False

    def give_back(self) -> None:
        """Return a token taken for a call that does not start with it (up to ``burst``)."""
        self._level = min(float(self.burst), self._level + 1.0)

    def wait_s(self) -> float:
        """Seconds until one token is available (0 when one is there now)."""
        return max(0.0, (1.0 - self._refill()) / self.rate)

    @property
    def level(self) -> float:
        """Tokens available now (fractional)."""
        return self._refill()
