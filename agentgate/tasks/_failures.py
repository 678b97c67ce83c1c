"""What becomes of a failed attempt and of a call given up (``_Failures``, a part of ``Scheduler``):
the error is classified, the breaker told, the retry rule asked, and a retry waits its backoff; a
call given up (``_GiveUp``, carrying the error its caller gets) after at least one failed attempt
becomes a dead letter. The sync facade's attempt loop (``_sync.py``) takes these same steps."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentgate._shown import quoted
from agentgate.errors import (
    CircuitOpen,
    DeadlineExceeded,
    InputError,
    Overloaded,
    SchedulingError,
    StoreError,
    TwinDeadlineExceeded,
)
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.tasks._backoff import full_jitter
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._call import OVERFLOW_BREAKER, PER_NAME_STATE, ToolCall, says_pause
from agentgate.tasks._classify import Classifier
from agentgate.tasks._config import ToolLimits
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._retry import Failure, RetryRule, rule_for
from agentgate.tasks._waiter import Waiter

_DEAD_LETTERS_KEPT = 1_000

_CUT_SHORT = frozenset({"transient", "connection"})
"""The classes of a failure the tool did not come to itself (its transport gave out): past the
tool's ``timeout_s``, and for an attempt the async core cut at its deadline, such a failure is a
``timeout`` (``_Failures._failed``): its effect is unknown, and ``transient`` would have a tool
not safe to repeat run again. ``error`` and custom classes are the tool's own answer, or the
classifier's for a cut, and stay so."""


class _GiveUp(Exception):
    """Internal: the call is given up for ``reason``; ``error`` is what the caller gets.

    ``at_deadline``: ``error`` is the scheduler's ``DeadlineExceeded`` for the call's own deadline
    (it could not start, or its attempt was cut, before it), not its tool's outcome: a call joined
    to this one gets ``TwinDeadlineExceeded`` rather than a deadline it did not set."""

    def __init__(self, reason: str, error: BaseException, *, at_deadline: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error
        self.at_deadline = at_deadline


class _TwinOutOfTime(Exception):
    """Internal: the outcome of a keyed call given up at its own deadline (``error``, its
    ``DeadlineExceeded``), for the calls joined to it; each raises its own error for it. Never
    raised to a caller, so no tool can raise it and be taken for it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


class _Failures:
    """The ``Scheduler``'s failures: a failed attempt noted, told to the breaker and put to the
    retry rule (``_failed``), the backoff before a retry (``_back_off``), and the dead letter of a
    call given up after a failed attempt, kept in memory (``dead_letters``) and persisted when
    there is a dead-letter store."""

    # The scheduler's state this part reads (``Scheduler.__init__`` sets it).
    metrics: SchedulerMetrics
    _rng: random.Random
    _classifier: Classifier
    _rules: dict[str, RetryRule]
    _dead: list[DeadLetter]
    _dead_store: DeadLetterStore | None
    _closing: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None
    _closed: bool

    if TYPE_CHECKING:  # what this part calls of the scheduler's other parts

        def _background_job(self, fn: Callable[..., None], *args: Any) -> concurrent.futures.Future[None]: ...

        @staticmethod
        def _followed(job: concurrent.futures.Future[None]) -> asyncio.Future[None]: ...

    def dead_letters(self) -> list[DeadLetter]:
        """Dead letters recorded by this scheduler (the newest 1,000), oldest first."""
        return list(self._dead)

    async def _back_off(self, delay: float) -> None:
        """Wait ``delay`` seconds before a retry, or until ``aclose`` begins: the retry is then
        refused (``SchedulingError``, reason ``closed``) at once, as the sync facade's is, instead
        of holding the drain for the rest of a backoff of up to ``backoff_max_s``."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._closing is None or self._closing[0] is not loop:
            self._closing = (loop, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._closing[1].wait()

    # --- the steps of an attempt loop, shared with the sync facade's (``_sync.py``) --------------

    def _failed(
        self,
        call: ToolCall,
        limits: ToolLimits,
        key: str | None,
        error: Exception,
        number: int,
        errors: list[AttemptError],
        breaker: CircuitBreaker,
        deadline: float | None,
        now: float,
        probe: int = 0,
        cut: bool = False,
        overran: bool = False,
    ) -> float:
        """Attempt ``number`` failed with ``error``: note it in ``errors``, tell the breaker (``probe``:
        the half-open period of the probe the attempt held, from ``admit_in_period``; 0: none),
        count it. An idempotency key counts for the retry rule only when it reaches the tool (``ToolCall.key_reaches_tool``). ``cut``: the call's own
        deadline, not the tool's ``timeout_s``, ended the attempt; as a cancelled call it says
        nothing about the tool, so the breaker is not told (its probe is given back): one caller's
        tight deadlines must not open the breaker of a tool that meets its own timeout for everyone.
        ``overran``: the attempt ran past its tool's ``timeout_s`` and failed without being cut
        there (a sync tool, work no cancellation stops, a plain function), or the async core cut it
        at its deadline (its tool's ``timeout_s``, or the call's own: ``cut``; ``error`` is then its
        own ``DeadlineExceeded``); either way its effect is unknown, and a failure of its transport
        (``transient``, ``connection``: ``_CUT_SHORT``) is a ``timeout``. Until review R89 a sync
        tool's late ``transient`` failure was retried, a tool not safe to repeat run again, where
        the async core gave up; until review R90 a cut the classifier called ``transient`` (as a
        nested call's ``Overloaded`` that never ran is) was too. A class the tool gave its failure
        itself, or the classifier gave a cut, keeps it: ``error`` (a bad argument the tool
        reported, which the breaker does not count and nothing retries unless listed) and a custom
        class (R89 made those ``timeout`` too, and a slow tool's bad arguments opened its breaker
        for everyone; R90 did so for every cut, and a classifier could no longer keep a slow
        tool's cuts out of ``trip_on``).

        Returns the backoff before the next attempt; raises ``_GiveUp`` when the retry rule has
        no next attempt (or it would start past ``deadline``; ``now`` is the time on its clock),
        and ``error`` itself when the call says it is a pause (``ToolCall.pauses``; a predicate
        that raises says it is not). The probe is told or given back on every way out: one
        interrupted (``KeyboardInterrupt``, ``SystemExit``) before the breaker is told gives it back.
        """
        try:
            if says_pause(call.pauses, error):
                # A pause (LangGraph's interrupt()), not a failure: as a cancellation, it says
                # nothing of the tool (its probe is given back below), and is neither retried nor
                # a dead letter.
                raise error
            try:
                found = self._classifier(error)
            except Exception:  # a broken classifier must not hide the tool's error: the safe class
                found = None
            error_class = found if isinstance(found, str) and found else "error"
            if overran and error_class in _CUT_SHORT:
                error_class = "timeout"
            # A call that keeps no error text (``Gate.run``'s) keeps none of any attempt's error,
            # an agentgate error included: what failed an attempt came out of the tool's run (an
            # ``InputError`` its code raised, a ``BackendFailed`` of a model it called), whose text
            # its code chose. Until review R84 an agentgate error's text was kept, and so written
            # into the dead letter and into the scheduler's refusal of the retry (``_final_error``),
            # which the LangGraph middleware tells the model.
            errors.append(
                AttemptError(
                    number,
                    error_class,
                    type(error).__qualname__,
                    _message(error) if call.keep_error_text else "",
                    time.time(),
                )
            )
        except BaseException:
            # A pause, or an interrupt (a Ctrl-C in the classifier, the ``pauses`` predicate or
            # the error's ``__str__``): says nothing of the tool, and its probe goes back. The
            # attempt loops leave the probe to this method once it is called, and their handler
            # for interrupts does not see one raised here: until review R89 it was kept, and the
            # breaker stayed half open with every probe taken, refusing every call for good.
            if probe:
                breaker.release(probe)
            raise
        if not cut:
            breaker.record_failure(error_class, period=probe)
        elif probe:
            breaker.release(probe)
        rule = self._rules.get(call.tool)
        if rule is None:
            if len(self._rules) >= PER_NAME_STATE:
                self._rules.clear()  # derived from the limits: made again when asked
            rule = self._rules[call.tool] = rule_for(limits)
        keyed = key is not None and call.key_reaches_tool
        reason = rule.objection(Failure(error, error_class, number, limits, keyed))
        if reason is None:
            delay = full_jitter(limits.retry, number, self._rng)
            if deadline is None or now + delay < deadline:
                self.metrics.event(
                    "retried",
                    call.tool,
                    {
                        "agentgate.attempt": number,
                        "agentgate.error_class": error_class,
                        "agentgate.delay_s": delay,
                    },
                )
                return delay
            reason = "deadline"
        raise _GiveUp(reason, error, at_deadline=cut) from error

    async def _dead_letter(
        self, call: ToolCall, key: str | None, errors: list[AttemptError], reason: str
    ) -> None:
        """Record the dead letter of a call given up for ``reason`` (``_record_dead``) and, with a
        dead-letter store, wait until it is written. The write runs to its end even when the call
        is cancelled meanwhile (a caller gone, ``aclose`` cancelling what is left), and ``aclose``
        waits for it: until review R91 a cancellation while the write waited for a store worker
        dropped it before it began, the letter neither stored nor counted as
        ``dead_letter_not_stored``."""
        letter = self._record_dead(call, key, errors, reason)
        if self._dead_store is not None:
            storing = self._background_job(self._store_dead, letter)  # it counts its failure
            await asyncio.shield(self._followed(storing))

    def _store_dead(self, letter: DeadLetter) -> None:
        """Persist ``letter`` (blocking; there is a dead-letter store). Any failure is counted as
        ``dead_letter_not_stored``, a span event of the call, on the async core's store pool as
        inline in a ``SyncScheduler``: a lost record is counted, not hidden. A ``StoreError`` is
        not raised (the caller gets the tool's error); another error (a store's own bug, a
        ``SystemExit`` or ``KeyboardInterrupt`` raised in the write) is raised once counted. Until
        review R91b the async core tallied such an error (no span event) and the sync scheduler
        did not count it at all; until review R91c neither counted a ``SystemExit`` or a
        ``KeyboardInterrupt``."""
        assert self._dead_store is not None
        try:
            self._dead_store.record(letter)
        except BaseException as exc:
            self.metrics.event("dead_letter_not_stored", letter.tool, {"agentgate.reason": letter.reason})
            if not isinstance(exc, StoreError):
                raise

    def _record_dead(
        self, call: ToolCall, key: str | None, errors: list[AttemptError], reason: str
    ) -> DeadLetter:
        """Keep the dead letter of a call given up for ``reason`` in memory and count it; return it."""
        letter = DeadLetter(
            id=uuid.uuid4().hex,
            recorded_at=time.time(),
            tool=call.tool,
            tenant=call.tenant,
            principal=call.principal,
            run_id=call.run_id,
            call_id=call.call_id,
            idempotency_key=key,
            arguments_digest=_digest_or_unknown(call),
            authority_chain=call.authority_chain,
            reason=reason,
            errors=tuple(errors),
        )
        self._dead.append(letter)
        del self._dead[:-_DEAD_LETTERS_KEPT]
        self.metrics.event(
            "gave_up", call.tool, {"agentgate.reason": reason, "agentgate.attempts": len(errors)}
        )
        return letter


def _message(error: BaseException) -> str:
    """The first 500 characters of ``str(error)``; a description of the error when its
    ``__str__`` raises (the tool's error must still reach its caller and the dead letter)."""
    try:
        return str(error)[:500]
    except Exception:
        return f"<{type(error).__qualname__}: str() raised>"


def _named(error: BaseException, keep_text: bool) -> str:
    """``error`` as a scheduler's message names it: its class, and the first line of its text (at
    most 200 characters) where ``keep_text`` (``ToolCall.keep_error_text``: a tool's text may quote
    its arguments)."""
    name = type(error).__qualname__
    lines = _message(error).splitlines() if keep_text else ()
    return f"{name}: {lines[0][:200]}" if lines and lines[0] else name


def _final_error(
    error: BaseException, failed: Exception | None, errors: list[AttemptError] | None
) -> BaseException:
    """The error a call given up with ``error`` ends with. ``failed``: its last failed attempt's
    exception (``errors`` records it). When ``error`` is the scheduler's refusal of a later
    attempt (the breaker opened, the scheduler closed, the deadline passed while the retry waited),
    the tool's error becomes its ``__cause__`` and its message names it as the dead letter records
    it (class, and text only where the call keeps error text), so that a user reading it sees why
    the call failed, not only why it stopped (until review R62 it was raised ``from None``). The
    tool's own error, and a ``DeadlineExceeded`` for a cut attempt, are returned as they are, with
    the cause and context the tool gave them."""
    if failed is None or error is failed or not errors or not isinstance(error, SchedulingError):
        return error
    last = errors[-1]
    first_line = last.message.splitlines()[0][:200] if last.message else ""
    named = f"{last.error_type}: {first_line}" if first_line else last.error_type
    if len(error.args) == 1 and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}; attempt {last.attempt} failed with {named}",)
    error.__cause__ = failed
    return error


def _circuit_open(breaker: CircuitBreaker, tool: str | None, refused: BreakerSnapshot) -> _GiveUp:
    """A call (to ``tool``) refused by ``breaker`` in the state ``refused`` (``refusal``,
    ``admission``: read under the lock that decided): the error says which breaker, whether it is
    open (and when it lets a probe through) or half open with every probe running, and that the
    breaker is the shared overflow when it is. (Until review R89 a half-open refusal read "is open
    (retry after 0.000s)", as if the breaker were open and a call could go now; until R89b the
    state was read after the refusal, and could be one that had not refused it.)"""
    retry_after = refused.retry_after_s
    shared = (
        f" (tool {quoted(tool)} shares it with the tools first seen past {PER_NAME_STATE} breaker keys)"
        if breaker.key == OVERFLOW_BREAKER and tool is not None
        else ""
    )
    if refused.state is BreakerState.OPEN:
        state = f"is open (retry after {retry_after:.3f}s)"
    else:  # half open with every probe taken
        limit = breaker.policy.half_open_max_calls
        state = f"is half open and its {limit} probe(s) are running (retry once one has ended)"
    return _GiveUp(
        "circuit_open",
        CircuitOpen(
            f"the circuit breaker {breaker.key}{shared} {state}",
            key=breaker.key,
            retry_after_s=retry_after,
        ),
    )


def _started_late(tool: str, waiter: Waiter) -> _GiveUp:
    """A call whose slots (a lease, a rate token) came only after its deadline: it never starts.

    The queue's timer refuses a call at its deadline, but a slot given back by a loop that was
    busy past it (a blocking tool), or a slow store, can grant the slots first."""
    waited = time.monotonic() - waiter.queued_at if waiter.queued else None
    queued = "" if waited is None else f" (queued {waited:.3f}s)"
    return _GiveUp(
        "deadline",
        DeadlineExceeded(
            f"tool {tool}: could not start before the call's deadline{queued}", tool=tool, waited_s=waited
        ),
        at_deadline=True,
    )


def _twin_late(call: ToolCall) -> DeadlineExceeded:
    """The error of a call whose running twin did not finish before this call's deadline."""
    return DeadlineExceeded(
        f"tool {call.tool}: the running call with this call's idempotency key did not finish "
        "before this call's deadline",
        tool=call.tool,
    )


def _twin_out_of_time(call: ToolCall, error: BaseException) -> TwinDeadlineExceeded:
    """The error of a call whose running twin was given up at its own deadline (``error``, its
    ``DeadlineExceeded``) while this call's had not passed: ``TwinDeadlineExceeded``, never a
    ``DeadlineExceeded`` this call's caller would take for its own."""
    return TwinDeadlineExceeded(
        f"tool {call.tool}: the running call with this call's idempotency key ended at a deadline "
        f"that is not this call's ({_message(error)})",
        tool=call.tool,
    )


def _give_up(error: SchedulingError) -> _GiveUp:
    """A call that could not start: given up for the reason ``error`` names."""
    reasons = {DeadlineExceeded: "deadline", Overloaded: "shed"}
    reason = reasons.get(type(error), "closed")
    return _GiveUp(reason, error, at_deadline=reason == "deadline")


def _digest_or_unknown(call: ToolCall) -> str:
    try:
        return call.digest()
    except InputError:
        return "unknown: arguments are not JSON values"
