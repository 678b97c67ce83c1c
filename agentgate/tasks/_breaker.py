"""Circuit breaker: stop calling a tool or backend that keeps failing, then probe it.

States and transitions (one breaker per key, shared by every caller of one scheduler):

- CLOSED: calls pass. ``failure_threshold`` consecutive failures of a class in ``trip_on``
  open it; a success resets the count.
- OPEN: calls are refused (``CircuitOpen``) until ``reset_timeout_s`` has passed since opening.
- HALF_OPEN: up to ``half_open_max_calls`` probe calls pass; the first probe success closes the
  breaker, a probe failure opens it again for another ``reset_timeout_s``. The failure of a call
  admitted before the breaker opened does not open it while probes run: they decide. Its
  success closes neither an OPEN nor a HALF_OPEN breaker (a slow call that started before the
  failures says little about the tool now).

Each entry into HALF_OPEN starts a new half-open period (numbered from 1). A probe still running
when its period ended (another probe, or another process through the store, reopened or closed
the breaker) is a call of an earlier period: ``admit_in_period`` says which period a probe holds,
and a probe of an earlier period reported with its ``period`` counts as a call admitted before
the breaker opened. Its outcome leaves the current probes to decide, and its release frees no
probe of the current period (else more than ``half_open_max_calls`` probes could run at once).

Failures outside ``trip_on`` (a bad argument, say) say nothing about the tool's health and leave
the count alone, so one agent's bad calls cannot switch a tool off for everyone.

Written here (pybreaker and purgatory exist) because the breaker must take the scheduler's
error classes and reserve half-open probes from an async and a sync path alike; the whole
mechanism is the state machine above.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from agentgate.tasks._config import BreakerPolicy


class BreakerState(StrEnum):
    """The three states; the value is what metrics and the CLI show."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerSnapshot:
    """A breaker's visible state at one moment."""

    key: str
    state: BreakerState
    consecutive_failures: int
    opened_count: int
    retry_after_s: float


class CircuitBreaker:
    """One breaker. Thread-safe. ``on_change(key, old, new)`` is called on every transition."""

    def __init__(
        self,
        key: str,
        policy: BreakerPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, BreakerState, BreakerState], None] | None = None,
    ) -> None:
        self.key = key
        self.policy = policy
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        #: True while CLOSED: a plain attribute, read without the lock on every call's fast path.
        self.closed = True
        #: True while CLOSED with no failure counted: a success has nothing to reset.
        self.healthy = True
        self._failures = 0
        self._opened_at = 0.0
        self._opened_count = 0
        self._probes = 0
        self._period = 0  # the latest half-open period; its probes are counted in ``_probes``

    def _set(self, new: BreakerState) -> None:
        old, self._state = self._state, new
        self.closed = new is BreakerState.CLOSED
        self.healthy = self.closed and not self._failures
        if new is BreakerState.OPEN:
            self._opened_at = self._clock()
            self._opened_count += 1
        if new is BreakerState.HALF_OPEN:
            self._period += 1
        self._probes = 0
        if self._on_change is not None and old is not new:
            self._on_change(self.key, old, new)

    def _current(self) -> BreakerState:
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self.policy.reset_timeout_s
        ):
            self._set(BreakerState.HALF_OPEN)
        return self._state

    @property
    def state(self) -> BreakerState:
        """The state now (an OPEN breaker whose timeout passed reads HALF_OPEN)."""
        with self._lock:
            return self._current()

    def refuses(self) -> bool:
        """True while the breaker is OPEN and its reset timeout has not passed (a cheap pre-check)."""
        if self._state is BreakerState.CLOSED:
            return False
        return self.state is BreakerState.OPEN

    def refusal(self) -> BreakerSnapshot | None:
        """``refuses``, with the state that refuses: a snapshot taken under the same lock as the
        decision (OPEN, and how long until a probe may go), else None. A snapshot taken after
        ``refuses`` may read HALF_OPEN with a probe free, its reset timeout passed in between."""
        if self._state is BreakerState.CLOSED:
            return None
        with self._lock:
            state = self._current()
            return self._snapshot(state) if state is BreakerState.OPEN else None

    def allow(self) -> bool:
        """May a call run now? In HALF_OPEN this reserves a probe: report its outcome, or ``release``."""
        return self.admit() is not None

    def admit(self) -> bool | None:
        """Like ``allow``, saying what the call holds: None when refused, True when admitted as a
        HALF_OPEN probe (report its outcome with ``record_success`` or ``record_failure(probe=True)``,
        or ``release`` it), False when admitted while CLOSED (it holds no probe)."""
        period = self.admit_in_period()
        return None if period is None else period > 0

    def admit_in_period(self) -> int | None:
        """Like ``admit``, saying which half-open period a probe belongs to: None when refused, 0
        when admitted while CLOSED (no probe), else the period (from 1) of the probe it holds.
        Pass it back as ``period`` to ``release``, ``record_success`` and ``record_failure``: a
        probe whose period has ended then touches nothing of the current one."""
        if self._state is BreakerState.CLOSED:
            return 0  # the common case, without the lock: a stale CLOSED read admits one call
        with self._lock:
            return self._admitted()

    def admission(self) -> int | BreakerSnapshot:
        """``admit_in_period``, with the state that refuses where it refuses: a snapshot taken
        under the same lock as the refusal (OPEN, or HALF_OPEN with every probe taken), so that
        what the refusal says is what refused it. Until review R89b the scheduler's message read
        the state after the refusal: where the reset timeout passed in between, a call refused
        while the breaker was open was told "half open and its probes are running", a probe free."""
        if self._state is BreakerState.CLOSED:
            return 0
        with self._lock:
            period = self._admitted()
            return self._snapshot(self._state) if period is None else period

    def _admitted(self) -> int | None:
        """``admit_in_period`` under the lock."""
        state = self._current()
        if state is BreakerState.CLOSED:
            return 0
        if state is BreakerState.HALF_OPEN and self._probes < self.policy.half_open_max_calls:
            self._probes += 1
            return self._period
        return None

    def _holds_probe(self, probe: bool | None, period: int | None) -> bool | None:
        """``probe`` as the calls below read it: with ``period`` given, True only for a probe of
        the current half-open period; one of an earlier period is a call that holds none (False)."""
        if period is None:
            return probe
        return period > 0 and self._state is BreakerState.HALF_OPEN and period == self._period

    def release(self, period: int | None = None) -> None:
        """Give back a probe reserved by ``allow`` for a call that did not run. ``period``: the
        one ``admit_in_period`` answered; a probe of an ended period gives nothing back."""
        with self._lock:
            if period is not None and not self._holds_probe(True, period):
                return
            if self._state is BreakerState.HALF_OPEN and self._probes > 0:
                self._probes -= 1

    def record_success(self, *, probe: bool | None = None, period: int | None = None) -> None:
        """A call succeeded: reset the failure count; a probe success closes the breaker.

        ``probe=False``: the call is known to hold no probe (``admit`` answered False: admitted
        before the breaker opened); its success leaves an OPEN breaker to its reset timeout and
        a HALF_OPEN one to the probes, as its failure would. Left out: counted as before.
        ``period``: what ``admit_in_period`` answered, in place of ``probe`` (a probe of an
        ended period counts as ``probe=False``).
        """
        if self._state is BreakerState.CLOSED and not self._failures:
            return
        with self._lock:
            probe = self._holds_probe(probe, period)
            if probe is False and self._current() is not BreakerState.CLOSED:
                return
            self._failures = 0
            self.healthy = self._state is BreakerState.CLOSED
            if self._state is not BreakerState.CLOSED:
                self._set(BreakerState.CLOSED)

    def record_failure(
        self, error_class: str, *, probe: bool | None = None, period: int | None = None
    ) -> None:
        """A call failed with ``error_class``; counts only if the class is in ``trip_on``.

        ``probe``: the call held a probe (``admit`` answered True). A failure outside ``trip_on``
        gives that probe back (it told nothing about the tool's health); a call that held none
        (admitted while CLOSED) gives nothing back, so no more probes run than the policy allows.
        ``probe=False``: the call is known to hold none (``admit`` answered False: admitted
        before the breaker opened); while probes run in HALF_OPEN its failure is left to them.
        Left out (a caller of ``allow``, which does not say): counted as before. ``period``: what
        ``admit_in_period`` answered, in place of ``probe`` (a probe of an ended period counts as
        ``probe=False``: its failure is left to the current probes, and it gives none back).
        """
        with self._lock:
            state = self._current()
            probe = self._holds_probe(probe, period)
            if error_class not in self.policy.trip_on:
                if probe and state is BreakerState.HALF_OPEN and self._probes > 0:
                    self._probes -= 1
                return
            if probe is False and state is BreakerState.HALF_OPEN and self._probes > 0:
                # A call admitted before the breaker opened: the probes in flight decide (opening
                # now would forget them, and let more probes run beside them after the timeout).
                return
            self._failures += 1
            self.healthy = False
            if state is BreakerState.HALF_OPEN or (
                state is BreakerState.CLOSED and self._failures >= self.policy.failure_threshold
            ):
                self._set(BreakerState.OPEN)

    def adopt_open(self, opened_ago_s: float, *, unchanged: Callable[[], bool] | None = None) -> bool:
        """Open because another process opened this breaker ``opened_ago_s`` seconds ago.

        ``unchanged``: asked with the breaker's lock held, so that no transition of this breaker
        comes between the answer and the adoption; False leaves the breaker as it is (a
        transition of this process came after the row was read: the row is older). True when
        adopted."""
        with self._lock:
            if unchanged is not None and not unchanged():
                return False
            if self._state is not BreakerState.OPEN:
                self._set(BreakerState.OPEN)
            self._opened_at = self._clock() - max(0.0, opened_ago_s)
            self._failures = 0
            return True

    def adopt_closed(self, *, unchanged: Callable[[], bool] | None = None) -> bool:
        """Close because another process's probe succeeded (``unchanged``: as for ``adopt_open``)."""
        with self._lock:
            if unchanged is not None and not unchanged():
                return False
            self._failures = 0
            if self._current() is not BreakerState.CLOSED:
                self._set(BreakerState.CLOSED)
            self.healthy = True
            return True

    def snapshot(self) -> BreakerSnapshot:
        """The visible state now."""
        with self._lock:
            return self._snapshot(self._current())

    def _snapshot(self, state: BreakerState) -> BreakerSnapshot:
        """``snapshot`` under the lock, of ``state`` as the caller read it (the state is read once:
        the clock read again may pass the reset timeout, and the snapshot would then say another
        state than the one decided on; ``retry_after_s`` is then 0)."""
        retry_after = 0.0
        if state is BreakerState.OPEN:
            retry_after = max(0.0, self.policy.reset_timeout_s - (self._clock() - self._opened_at))
        return BreakerSnapshot(self.key, state, self._failures, self._opened_count, retry_after)
