"""How the ``Gate`` runs an allowed call (``_Running``): ``run``/``arun`` under the scheduler,
inside the call's span, and how the call's end is settled."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Container, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from itertools import chain
from types import FunctionType
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, ProxyTracerProvider, Span, Tracer
from prometheus_client import CollectorRegistry

from agentgate._shown import quoted
from agentgate.audit.spans import (
    await_outcome,
    chat_span,
    decision_span,
    execute_tool_span,
    outcome_not_written,
    record_agent_name,
    record_decision,
    record_outcome,
    record_usage,
)
from agentgate.capabilities import Call
from agentgate.errors import ApprovalRequired, BackendFailed, Denied, InputError, NoBackend, SchedulingError
from agentgate.gate._authorization import AgentIdentity, Authorization, expect, shown
from agentgate.gate._checks import _AUTHORIZATION, _expect_id
from agentgate.gate._costs import _usage_counts
from agentgate.gate._outcomes import (
    MAX_ERROR_DETAIL,
    NOT_STARTED,
    NOT_STARTED_DETAIL,
    USAGE_UNREAD,
    never_sent,
    usage_after,
)
from agentgate.gate._records import redact_reasons
from agentgate.policy import Policy
from agentgate.store import Store
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SharedLimits, SyncScheduler, ToolCall
from agentgate.tasks._call import not_begun, says_pause, unawaited

T = TypeVar("T")
P = ParamSpec("P")


_log = logging.getLogger("agentgate.gate")


async def _result_of(value: Awaitable[T]) -> T:
    """``value``, what ``arun``'s ``fn`` returned, awaited. A plain function given where a
    coroutine function belongs has already run when it returns: its value is the call's result
    (awaiting it would fail after the effect, and the outcome would say the call failed)."""
    if inspect.isawaitable(value):
        return await value
    return cast(T, value)


def _async_generator_fn(resource: str) -> InputError:
    """The error for an ``fn`` given to ``Gate.arun`` that returned an async generator (an async
    generator function): none of its body ran, and it cannot be awaited. Until review R87c the
    generator was the call's result, recorded ``ok`` and charged, a once-only tool never run."""
    return InputError(
        f"{resource}: Gate.arun called an async generator function, whose body never ran and which "
        "cannot be awaited; give Gate.arun a coroutine function"
    )


def _outcome_lost(auth: Authorization) -> None:
    _log.error(
        "agentgate: the outcome of audit entry %s is not recorded: the gate closed before the call settled",
        auth.audit_index,
    )


def _failure_carried(raised: list[BaseException]) -> BaseException | None:
    """The failure that the last exception ``fn`` raised carries, when that is a cancellation
    raised from it (``raise cancelled from error``) and it is not a cancellation itself: the call
    failed while it was cancelled (``arun``). Until review R58 it was recorded as cancelled."""
    if not raised or not isinstance(raised[-1], asyncio.CancelledError):
        return None
    cause = raised[-1].__cause__
    return None if cause is None or isinstance(cause, asyncio.CancelledError) else cause


def _raised_by_fn(exc: BaseException, raised: list[BaseException]) -> bool:
    """Whether ``exc`` is one of the exceptions ``fn`` itself raised, compared by identity: an
    exception class's own ``__eq__`` may raise (one comparing fields another lacks), and until
    review R89 that error replaced the call's, its outcome never recorded, its reservation held."""
    return any(own is exc for own in raised)


def _failure_reason(exc: BaseException) -> str:
    """The reason an outcome gives for ``exc``: its class name, and for ``NoBackend`` and
    ``BackendFailed`` why the backends failed (an HTTP 302, garbage, no answer in time, a stream
    cut after output), as the gateway gives it: that belongs in the evidence, not only in a log,
    and the message names no backend key (scrubbed). A message that cannot be read (a subclass
    whose ``__str__`` raises) is left out: until review R91 its error replaced the call's own,
    whose outcome was never written and whose reservation stayed held. A message of a ``str``
    subclass is read as plain ``str``: until review R91b its ``__bool__`` or ``__getitem__`` that
    raised did the same."""
    if isinstance(exc, NoBackend | BackendFailed):
        try:
            message = str.__str__(str(exc))
        except Exception:
            message = ""
        if message:
            return f"{type(exc).__name__}: {message[:MAX_ERROR_DETAIL]}"
    return type(exc).__name__


def _forget_failed(forget: Callable[[T], None] | None, result: T, auth: Authorization) -> None:
    """Drop ``result``, which the call is settled as failed with, from the scheduler's result
    cache (``forget``: ``forget_result``), so that a retry with its ids runs the tool. An error
    from it is logged, by its type, and goes no further: the call must be settled all the same.
    Until review R91b a ``KeyError`` from it (a result of ``None``) replaced the call's own end,
    its outcome never written and its reservation held."""
    if forget is None:
        return
    try:
        forget(result)
    except Exception as exc:
        _log.error(
            "agentgate: audit entry %s: its failed result was not dropped from the scheduler's "
            "result cache (%s): a retry with its ids may be handed it",
            auth.audit_index,
            type(exc).__name__,
        )


def _not_a_failure(cls: type[BaseException]) -> InputError:
    """The error for a ``failed`` that returned the exception class ``cls`` (``lambda r:
    ValueError``), not an exception: until review R85 it was read for its truth and recorded an
    ``error`` outcome with no reason, and nothing was raised. The class is named by its module
    and qualified name (by its name alone when built in)."""
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return InputError(
        f"failed must return a bool or an exception, got the exception class {name}, "
        f"not an exception (return {name}(...))"
    )


_ASYNC_CODE = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _is_async_function(fn: object) -> bool:
    """Whether calling ``fn`` runs none of its body and returns a coroutine or an async generator:
    an ``async def`` function (a ``functools.partial`` of one included), or an object whose
    ``__call__`` is one. A plain function (a ``lambda``) is read from its code's flags: ``run``
    checks up to three callbacks per call, and ``inspect`` takes microseconds for each. One that
    returns a coroutine all the same is caught when it returns (``_finish``)."""
    if type(fn) is FunctionType:
        return bool(fn.__code__.co_flags & _ASYNC_CODE)
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (fn, type(fn).__call__)
    )


def _async_fn(resource: str) -> InputError:
    """The error for an ``fn`` given to ``Gate.run`` that returned a body that never began
    (``not_begun``: an async function's coroutine, an async generator): until review R87 a
    model call was recorded ``ok`` and charged, the coroutine returned as its result, and until
    R87b so were the others."""
    return InputError(
        f"{resource}: Gate.run called an async function, whose body never ran; run it with Gate.arun"
    )


def _not_awaited(name: str, value: object) -> InputError:
    """The error for a ``failed`` or ``spent`` that returned async work (``unawaited``), which
    ``run`` and ``arun`` read at once and never await, closed here (until review R87 ``spent``'s
    coroutine was charged as reserved and its ``repr`` written into the outcome, ``failed``'s
    read as a failure; until R87b so was any other awaitable)."""
    not_begun(value)  # closes a coroutine: it is never awaited
    what = "a coroutine" if inspect.iscoroutine(value) else shown(value)
    return InputError(f"{name} returned {what}, which is never awaited: give {name} a plain function")


def _work_began(began: Callable[[], bool], started: bool) -> bool:
    """Whether the work of a cancelled ``arun`` call began, as its ``began`` says (``started``:
    whether an attempt entered ``fn``). A ``began`` that raises, or returns a coroutine (an
    async function behind a ``lambda``, which ``_check_allowed`` cannot tell; closed unawaited),
    says nothing, and keeps nothing from beginning: the call is then started as it is without a
    ``began``, once an attempt entered ``fn``. Read as "not begun", a once-only call would run
    again on resume while the work it handed off may still begin; until review R87b the
    coroutine was read for its truth, and what ``began`` raised replaced the cancellation, the
    outcome left unwritten."""
    try:
        said = began()
        if unawaited(said):
            not_begun(said)  # closes a coroutine: it is never awaited
            return started
        return bool(said) and started
    except Exception:
        return started


def _expect_decided_ids(auth: Authorization, call_id: object, run_id: object) -> None:
    """``InputError`` for a ``run``/``arun`` ``call_id`` or ``run_id`` other than the one ``auth``
    was decided with (``Gate.authorize``): its approval request and its once-only key are bound
    to the decided call, and its span and idempotency key must name that call. One the decision
    did not have may be given, and one left out is left out: the span names the decided call id
    (``_span``), but only the ids given to ``run``/``arun`` key the scheduler's idempotency (a
    call decided with a ``call_id`` and run without one has no key and runs its tool each time,
    as before review R90). Until review R90 any ids were taken: the span of a call approved as
    ``A`` named call ``B`` as approved and run, and the scheduler reused results under ``B``'s key.
    Both are compared as plain text (``_plain_id``): until review R91c a decided ``str``
    subclass's own ``__ne__`` was called, which took a case-insensitive twin for the decided id,
    or raised out of ``run`` an error of its own."""
    for name, given, decided in (("call_id", call_id, auth.call_id), ("run_id", run_id, auth.run_id)):
        # ``given`` is plain text or None (``run``/``arun`` read it so, ``_expect_id`` checked it);
        # ``decided`` is text or None (``Gate.authorize``), read as plain text here.
        decided = _plain_id(decided)
        if given is not None and decided is not None and given != decided:
            raise InputError(
                f"{name} {quoted(given)} is not the one the allow of {auth.call.resource} (audit entry "
                f"{auth.audit_index}) was decided with ({quoted(decided)}): an allow runs the call it "
                f"was decided for; give it the {name} given to Gate.authorize, or none"
            )


def _plain_id(value: str | None) -> str | None:
    """A ``run``/``arun`` ``call_id`` or ``run_id`` that is text of a ``str`` subclass, as plain
    ``str`` with its characters (anything else as given, for ``_check_allowed`` to refuse): the
    ids are read as text (for their truth, hashed, compared, joined into the idempotency key) after
    the allow is used and before the call is counted in flight, and a subclass's ``__bool__``,
    ``__hash__`` or ``__eq__`` that raises must not replace the call's end. Until review R91b its
    error came out of ``run`` with no outcome written, and one from ``__hash__`` left the call
    counted in flight, so that ``Gate.close`` waited for it for ever."""
    return str.__str__(value) if issubclass(type(value), str) else value


_NO_FN = object()
"""``_check_allowed``'s ``fn`` when the caller runs no function (``abandon``)."""

_TwinKey = tuple[str, asyncio.AbstractEventLoop | None]
"""A tool call's idempotency key, the scheduler's own (``ToolCall.idempotency_key``: tenant,
principal, grant, run, tool, call id and arguments digest), and the event loop of its scheduler
(``None``: the sync one): a call joins a twin of its own scheduler only, with that very key. Until
review R91c the digest was left out, so that a call waiting on a twin kept the failures of every
call with its ids and other arguments, which it cannot join; until review R92 the tenant, the
principal and the grant were, and it kept those of every call with its ids under another grant,
agent or tenant."""


class _Keyed:
    """One ``run``/``arun`` tool call among those with its ``ids`` (``_SameIds``): the list of
    what its ``fn`` raised, whether an attempt entered its ``fn`` (``entered``: it runs the
    tool itself, and is never handed a twin's outcome), whether it ended (``left``), and when
    it began among the calls with its ids (``began``)."""

    __slots__ = ("began", "entered", "ids", "left", "raised")

    def __init__(self, ids: _TwinKey, raised: list[BaseException]) -> None:
        self.ids = ids
        self.raised = raised
        self.entered = False
        self.left = False
        self.began = 0


class _SameIds:
    """The tool calls with one ``_TwinKey`` in flight through a Gate (``running``, a count), and
    what the ``fn`` of those that ended raised, while a call that may have joined it has not
    ended (``ended``). A call that joined its running twin (the scheduler's call with the same
    idempotency key) is handed what the twin ended with, the very exception its ``fn`` raised (or
    one chaining it, ``tasks._failures._final_error``): found here, that is the twin's failure
    reused (``_raised_by_twin``). A joiner may be woken after its twin ended (``_end_run``), so a
    failure is kept past its call's end, for the calls then in flight that never entered their
    own ``fn`` (only those can have joined it), until each has ended or entered its ``fn``: while
    the oldest such call (``waiting``, in the order the calls began) began before it ended. Each
    call is counted in and out in constant time (amortized): until review R91c every end walked
    every call in flight, under the gate's lock, so that N joiners of one twin took O(N²). Until
    review R91b the list of every call that ended, its exceptions and their tracebacks, was kept
    while any call with the ids was in flight, on either scheduler: under a call that ran long,
    every joiner and failed retry beside it added one."""

    __slots__ = ("clock", "ended", "entered", "running", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.clock = 0  # counts the calls' beginnings and failed ends, in order
        self.waiting: deque[_Keyed] = deque()  # by ``began``; those that ended or entered go lazily
        self.entered: set[_Keyed] = set()  # those in flight that entered their ``fn``
        self.ended: deque[tuple[int, list[BaseException]]] = deque()  # by when each ended

    def join(self, keyed: _Keyed) -> None:
        """Count ``keyed`` in (it has not entered its ``fn``)."""
        self.running += 1
        self.clock += 1
        keyed.began = self.clock
        self.waiting.append(keyed)

    def enter(self, keyed: _Keyed) -> None:
        """``keyed`` entered its ``fn``: it joins no twin now."""
        if not keyed.entered:
            keyed.entered = True
            self.entered.add(keyed)

    def leave(self, keyed: _Keyed) -> bool:
        """Count ``keyed`` out, keeping its failure for the calls that may have joined it;
        whether any call with the ids is left in flight."""
        self.running -= 1
        keyed.left = True
        self.entered.discard(keyed)
        if not self.running:  # the usual case: the entry goes, with all it kept
            return False
        waiting = self.waiting
        while waiting and (waiting[0].left or waiting[0].entered):
            waiting.popleft()
        if len(waiting) > 2 * self.running + 8:  # those that ended behind the oldest go too
            self.waiting = waiting = deque(k for k in waiting if not (k.left or k.entered))
        if keyed.raised and waiting:
            self.clock += 1
            self.ended.append((self.clock, keyed.raised))
        oldest = waiting[0].began if waiting else self.clock + 1
        while self.ended and self.ended[0][0] < oldest:  # no call that may have joined it is left
            self.ended.popleft()
        return True

    def raised_one_of(self, seen: tuple[BaseException, ...]) -> bool:
        """Whether the ``fn`` of a call here raised one of ``seen``, compared by identity: the
        failures kept first (a joiner is most often woken after its twin ended), then those of
        the calls in flight that entered their ``fn`` (only those can have raised)."""
        lists = chain((raised for _, raised in reversed(self.ended)), (k.raised for k in self.entered))
        return any(own is one for raised in lists for own in raised for one in seen)


class _Running:
    """The ``Gate``'s runs: ``run`` and ``arun`` check an allow (one decision, one run), count the
    call in flight for ``close``, run tools under the gate's schedulers (one sync, one per event
    loop, sharing one set of limits), trace the call as a GenAI span, and settle how it ended
    (``_finish``, ``_fail``, ``abandon``) through ``_settle``."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    registry: CollectorRegistry
    tracer: Tracer
    _global_tracer: bool
    store: Store
    _limits: SharedLimits
    _sync_scheduler: SyncScheduler | None
    _async_schedulers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scheduler]
    _scheduler_lock: threading.Lock
    _runs_changed: threading.Condition
    _runs: int
    _loop_runs: dict[asyncio.AbstractEventLoop, int]
    _same_ids: dict[_TwinKey, _SameIds]
    _closing: bool
    _outcomes_closed: bool

    if TYPE_CHECKING:  # what this part calls of the gate's other parts

        def _tenant_of(self, did: str) -> str: ...

        def _policy_principal(self, identity: AgentIdentity) -> str: ...

        def _loggable(self, call: Call) -> list[str]: ...

        def _declared(self, call: Call) -> Container[str] | None: ...

        def _seal(self, auth: Authorization, *, kept: bool = False) -> tuple[object, ...]: ...

        def explain_redacted(self, auth: Authorization) -> str: ...

        def _settle(
            self,
            auth: Authorization,
            status: str,
            error: str | None,
            usage: tuple[int, int] | None,
            *,
            started: bool = True,
            reused: bool = False,
            span: Span | None = None,
        ) -> None: ...

    def _tool_call(
        self,
        auth: Authorization,
        call_id: str | None,
        run_id: str | None,
        paused: Callable[[BaseException], bool] | None = None,
    ) -> ToolCall:
        identity = auth.identity
        assert identity is not None
        return ToolCall(
            tool=auth.call.resource.removeprefix("tool:"),
            arguments=auth.call.args,
            tenant=self._tenant_of(self._policy_principal(identity)),
            principal=identity.name,
            # The per-agent limit counts the key: a grant that binds no name may go by several.
            holder=identity.did,
            # Idempotency keys (and the reuse of a completed result) are scoped to the run the
            # caller names (a LangGraph thread), else to the grant.
            run_id=run_id or identity.grant_id,
            call_id=call_id,
            # ``fn`` takes no ``Attempt``, so the key never reaches the tool: a tool that
            # ``takes_idempotency_key`` is then not repeated after an ambiguous failure.
            key_reaches_tool=False,
            # A tool's exception text may quote its arguments: its dead letter keeps the type only.
            keep_error_text=False,
            # A call that must run once is kept from a second run by its store record; a result
            # kept in memory must not stand in for a run an operator settled as not run.
            reuse_result=auth.once_key is None,
            # A pause (LangGraph's interrupt()) leaves the scheduler as it came: not a failure.
            pauses=paused,
            grant_expires_at=float(identity.chain.tip.expires),
            authority_chain=identity.chain.ids,
            # The authority engine digested these very arguments by the same rule (SHA-256 of
            # their canonical JSON) to decide the call: the idempotency key reuses it.
            arguments_digest=auth.decision.args_digest if auth.decision is not None else None,
        )

    def run(
        self,
        auth: Authorization,
        fn: Callable[[], T],
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        failed: Callable[[T], bool | BaseException] | None = None,
        spent: Callable[[T], tuple[int, int] | None] | None = None,
        paused: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """Run ``fn`` for an allowed call (tools under the scheduler), audit the outcome, settle the budget.

        Raises ``Denied`` for an authorization that is not an allow, ``SchedulingError`` once
        ``close`` began. Re-raises what ``fn`` (or the scheduler: ``Overloaded``,
        ``DeadlineExceeded``, ``CircuitOpen``) raises, after recording the failure and releasing
        the reservation; what ``failed`` or ``spent`` raises, after recording an error outcome
        charged as reserved (the call ran); the exception ``failed`` returns (instead of a
        boolean: the call ran and failed), after recording an error outcome charged at the usage
        ``spent`` read; ``InputError`` for an exception class ``failed`` returns, as for what it
        raises (any other value it returns is read for its truth). A tool's result settled as an
        ``error`` so is dropped from the scheduler's result cache: a retry with the same ids runs
        the tool, as after a tool that raised. ``fn`` gets no idempotency key, so a tool that
        ``takes_idempotency_key`` is not repeated after an ambiguous failure (docs/tasks.md).
        An exception for which ``paused`` is true is a pause, not a failure (LangGraph's
        ``interrupt()`` inside a tool): the outcome is ``paused``, the reservation released, and
        an approval the call consumed is put back for this call, to be replayed when it resumes;
        a ``paused`` that raises, or returns a coroutine (``says_pause``), says no.
        ``InputError`` (nothing run or written, the allow left unused) for an ``auth`` that is not
        an ``Authorization``, an ``fn`` that is not callable, a ``paused``, ``failed`` or
        ``spent`` that is neither None nor a plain function (an async one's result would be read
        unawaited), or a ``call_id`` or ``run_id`` that is neither None nor valid Unicode text,
        or that is not the one the call was decided with (``Gate.authorize``: its approval and its
        once-only key are bound to that call). A ``call_id`` left out is the decided one on the
        call's span, but the idempotency key is made of the ids given here alone: a tool call
        decided with a ``call_id`` and run without one has no key, and its tool runs each time.
        An ``fn`` that returns a body that never began (a coroutine, a generator-based coroutine,
        an async generator: an async function, which ``arun`` runs) is a call that never
        started, for a model as for a tool: an ``error`` outcome, its reservation released, a
        once-only call left as not run, and ``InputError`` (until review R87 a model call
        returned the coroutine, was recorded ``ok`` and charged, and a tool call was recorded as
        one that may have had its effect, never to run again; until R87b so did the other two).
        One that returns any other awaitable (a task, a future, a handle with ``__await__`` such
        as ``ray.ObjectRef``) returns it as the call's result, recorded ``ok``: the caller holds
        the handle, and whether its work is done ``run`` cannot know (from review R87b to R87c it
        was refused after the work was set going, charged as reserved, the handle lost).
        """
        call_id, run_id = _plain_id(call_id), _plain_id(run_id)
        self._check_allowed(auth, fn, paused, failed, spent, call_id=call_id, run_id=run_id)
        raised: list[BaseException] = []  # what ``fn`` itself raised (a nested call's refusal too)
        keyed: _Keyed | None = None  # among the calls with its idempotency key (``_join_twins``)
        self._begin_run(auth)
        started = False  # whether an attempt reached ``fn``
        forget: Callable[[T], None] | None = None  # drops a failed result from the scheduler's cache
        try:
            with self._span(auth, call_id) as span:
                try:
                    if auth.call.resource.startswith("tool:"):

                        def attempt(_attempt: Attempt) -> T:
                            nonlocal started
                            began, started = started, True
                            if keyed is not None:
                                self._entered(keyed)
                            try:
                                value = fn()
                            except BaseException as exc:
                                raised.append(exc)
                                raise
                            if not_begun(value):  # none of its body ran:
                                started = began  # the scheduler refuses it with InputError
                            return value

                        scheduler, call = self._sync(), self._tool_call(auth, call_id, run_id, paused)
                        keyed = self._join_twins(call, raised)
                        forget = partial(scheduler.forget_result, call)
                        result = scheduler.submit(call, attempt)
                    else:
                        started = True
                        result = fn()
                        if not_begun(result):  # none of its body ran
                            started = False
                            raise _async_fn(auth.call.resource)
                except BaseException as exc:
                    self._fail_after(span, auth, exc, paused, started, raised, keyed)
                    raise
                # Returned with no attempt entered: the scheduler served another call's result.
                self._finish(span, auth, result, failed, spent, reused=not started, forget=forget)
                return result
        finally:
            self._end_run(keyed=keyed)

    async def arun(
        self,
        auth: Authorization,
        fn: Callable[[], Awaitable[T]],
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        failed: Callable[[T], bool | BaseException] | None = None,
        spent: Callable[[T], tuple[int, int] | None] | None = None,
        paused: Callable[[BaseException], bool] | None = None,
        preemptible: bool = True,
        began: Callable[[], bool] | None = None,
    ) -> T:
        """The async twin of ``run``: the scheduler's limits hold for coroutines too.

        ``preemptible=False`` for a tool call whose work no cancellation stops (a sync function
        in a worker thread): past its timeout it runs to its end and its result is returned and
        recorded, as under ``run`` (``Scheduler.submit``). Cancelled while such an attempt runs,
        the call waits for it (``Scheduler.submit``), starts no further attempt, and is recorded
        and charged as the attempt ended; then the cancellation goes on. So is any tool call whose
        attempt returned before the cancellation reached it: it ran.

        ``began``, for a call whose work ``fn`` hands to a place where it may wait before it
        begins (a sync tool's worker thread, queued behind a busy executor): called once when the
        call is cancelled, after its attempt ended; it says whether the work of any attempt began,
        and from then on keeps it from beginning. A cancelled call whose work never began is then
        recorded as not started (a once-only call runs when its run is resumed), though an attempt
        was entered; one whose work began is recorded as started (never run twice). Without it, a
        call is started once an attempt entered ``fn``; so it is with a ``began`` that raises or
        returns a coroutine (``_work_began``), and an async ``began`` is refused with
        ``InputError`` before the allow is used, as an async ``paused`` is.

        A cancellation that ``fn`` itself raised with a cause that is not a cancellation (``raise
        cancelled from error``: a sync tool that failed in its thread while its loop shut down)
        is recorded as that failure of the call, as if ``fn`` had raised it; the cancellation
        goes on.

        An ``fn`` that returns an async generator (an async generator function, or a ``lambda``
        returning one: nothing to await, none of its body run) is a call that never started, as
        under ``run``: an ``error`` outcome, its reservation released, a once-only call left as
        not run, and ``InputError`` (until review R87c it was returned as the result, recorded
        ``ok`` and charged)."""
        call_id, run_id = _plain_id(call_id), _plain_id(run_id)
        self._check_allowed(
            auth,
            fn,
            paused,
            failed,
            spent,
            call_id=call_id,
            run_id=run_id,
            preemptible=preemptible,
            began=began,
        )
        loop = asyncio.get_running_loop()
        raised: list[BaseException] = []  # what ``fn`` itself raised (a nested call's refusal too)
        keyed: _Keyed | None = None  # among the calls with its idempotency key (``_join_twins``)
        self._begin_run(auth, loop)
        started = False  # whether an attempt reached ``fn``
        returned: list[T] = []  # what an attempt returned, should a cancellation follow it
        forget: Callable[[T], None] | None = None  # drops a failed result from the scheduler's cache
        try:
            with self._span(auth, call_id) as span:
                try:
                    if auth.call.resource.startswith("tool:"):

                        def attempt(_attempt: Attempt) -> Awaitable[T]:
                            nonlocal started
                            began, started = started, True
                            if keyed is not None:
                                self._entered(keyed)
                            try:
                                value = fn()
                            except BaseException as exc:
                                raised.append(exc)
                                raise
                            if inspect.isasyncgen(value):  # none of its body ran:
                                started = began  # the scheduler refuses it with InputError
                                return value
                            return awaited(value)

                        async def awaited(value: Awaitable[T]) -> T:
                            try:
                                result = await _result_of(value)
                            except BaseException as exc:
                                raised.append(exc)
                                raise
                            returned.append(result)
                            return result

                        scheduler = await self._async()
                        call = self._tool_call(auth, call_id, run_id, paused)
                        keyed = self._join_twins(call, raised, loop)
                        forget = partial(scheduler.forget_result, call)
                        result = await scheduler.submit(call, attempt, preemptible=preemptible)
                    else:
                        started = True
                        value = fn()
                        if inspect.isasyncgen(value):  # none of its body ran
                            started = False
                            raise _async_generator_fn(auth.call.resource)
                        result = await _result_of(value)
                except asyncio.CancelledError as exc:
                    if returned:  # the call ran to its end: recorded and charged as it ended
                        self._finish(span, auth, returned[-1], failed, spent, forget=forget)
                    else:
                        if began is not None:  # whether the work began, not just an attempt
                            started = _work_began(began, started)
                        if (failure := _failure_carried(raised)) is not None:
                            self._fail(span, auth, failure, paused, started=started, ran=True)
                        else:
                            self._fail(span, auth, exc, paused, started=started)
                    raise
                except BaseException as exc:
                    self._fail_after(span, auth, exc, paused, started, raised, keyed)
                    raise
                # Returned with no attempt entered: the scheduler served another call's result.
                self._finish(span, auth, result, failed, spent, reused=not started, forget=forget)
                return result
        finally:
            self._end_run(loop, keyed)

    def _begin_run(self, auth: Authorization, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Count a ``run``/``arun`` in flight (``close`` waits for it to settle). Once ``close``
        began, refuse it: record an ``error`` outcome (while outcomes are still written) and
        raise ``SchedulingError``."""
        with self._runs_changed:
            if not self._closing:
                self._runs += 1
                if loop is not None:
                    self._loop_runs[loop] = self._loop_runs.get(loop, 0) + 1
                return
        self._settle_not_run(auth, "SchedulingError", "SchedulingError")
        raise SchedulingError(f"{auth.call.resource}: the gate is closed; the call was not run")

    def _join_twins(
        self, call: ToolCall, raised: list[BaseException], loop: asyncio.AbstractEventLoop | None = None
    ) -> _Keyed | None:
        """Count a ``run``/``arun`` tool call in flight (``_begin_run``), about to be submitted
        to its scheduler (``loop``'s; ``None``: the sync one), among the calls that share its
        idempotency key (``_SameIds``), of which it may join a running twin; ``raised``: what its
        ``fn`` raises. ``None`` for a call with no key (no ``call_id``), which joins none. The key
        is the scheduler's own, computed once with the call (``ToolCall.idempotency_key``): the
        calls kept together are those the scheduler may join, no more (review R92)."""
        key = call.idempotency_key()
        if key is None:
            return None
        keyed = _Keyed((key, loop), raised)
        with self._runs_changed:
            same = self._same_ids.get(keyed.ids)
            if same is None:
                same = self._same_ids[keyed.ids] = _SameIds()
            same.join(keyed)
        return keyed

    def _entered(self, keyed: _Keyed) -> None:
        """A tool call counted among the calls with its key (``_join_twins``) entered its ``fn``."""
        with self._runs_changed:
            same = self._same_ids.get(keyed.ids)
            if same is not None:
                same.enter(keyed)

    def _end_run(self, loop: asyncio.AbstractEventLoop | None = None, keyed: _Keyed | None = None) -> None:
        """A ``run``/``arun`` settled (its outcome pending, or lost: ``_settle_unless_closed``) or
        failed to: count it out (of the calls with its ids too, forgotten with the last)."""
        with self._runs_changed:
            self._runs -= 1
            if keyed is not None and not self._same_ids[keyed.ids].leave(keyed):
                del self._same_ids[keyed.ids]
            if loop is not None:
                left = self._loop_runs[loop] - 1
                if left:
                    self._loop_runs[loop] = left
                else:
                    del self._loop_runs[loop]
            if not self._runs:
                self._runs_changed.notify_all()

    def _settle_unless_closed(
        self,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        *,
        started: bool = True,
        reused: bool = False,
        span: Span | None = None,
    ) -> bool:
        """``_settle``, unless ``close`` has committed its last outcomes: then nothing will write
        this one, which is logged as lost, and the answer is ``True`` (the call's span says so,
        ``outcome_not_written``). Decided under the lock ``close`` sets that under, so an outcome
        queued here is one its last flush takes. ``reused`` and ``span``: as ``_settle``'s."""
        with self._runs_changed:
            lost = self._outcomes_closed
            if not lost:
                self._settle(auth, status, error, usage, started=started, reused=reused, span=span)
        if lost:
            _outcome_lost(auth)
        return lost

    def _settle_traced(
        self,
        span: Span,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        *,
        started: bool = True,
        reused: bool = False,
        error_type: str | None = None,
    ) -> None:
        """``_settle_unless_closed``, with the outcome on the call's ``span`` as the log will have
        it: the span waits for the outcome (``await_outcome``), says ``agentgate.outcome`` once it
        is written and ends then (at the time its block left), or says that it is not written
        (``outcome_not_written``: the gate had closed, or the store refused it for good; ERROR,
        ``agentgate.outcome.lost=true``, no ``agentgate.outcome``). ``error_type``: the class name
        of what ended the call, for ``error.type`` (``record_outcome``). One rule for tool and
        model calls, sync or async, the gateway's streams and the calls that never run; until
        review R69 the span said ``agentgate.outcome=ok`` before the entry was written, and kept
        saying it when the store then refused the entry."""
        traced = span.is_recording()
        if traced:
            await_outcome(span)
            record_outcome(span, status, error_type=error_type)
        try:
            lost = self._settle_unless_closed(
                auth, status, error, usage, started=started, reused=reused, span=span if traced else None
            )
        except BaseException:
            if traced:
                outcome_not_written(span)
            raise
        if lost and traced:
            outcome_not_written(span)

    def _span(self, auth: Authorization, call_id: str | None = None) -> AbstractContextManager[Span]:
        """The GenAI span of the call (``execute_tool NAME`` or ``chat MODEL``) with the decision on
        it, naming ``call_id``, else the call id the call was decided with (an abandoned call's too).

        No span at all while the gate traces through the global tracer and no tracer provider is
        installed: nothing could record it (the current span, and so the context a tool sees,
        stays what it was). A provider installed later is used from the next call on.
        """
        if self._untraced():
            return nullcontext(INVALID_SPAN)
        return self._open_span(auth, auth.call_id if call_id is None else call_id)

    def _untraced(self) -> bool:
        """Whether nothing could record a span: the gate traces through the global tracer and no
        tracer provider is installed. Its spans are then not made at all (``_span``)."""
        return self._global_tracer and isinstance(trace.get_tracer_provider(), ProxyTracerProvider)

    @contextmanager
    def _open_span(self, auth: Authorization, call_id: str | None) -> Iterator[Span]:
        kind, _, name = auth.call.resource.partition(":")
        opened = (
            execute_tool_span(name, call_id=call_id, tracer=self.tracer)
            if kind == "tool"
            else chat_span(name, tracer=self.tracer)
            if kind == "model"
            else decision_span(auth.call.resource, auth.call.action, tracer=self.tracer)
        )
        with opened as span:
            identity = auth.identity
            if span.is_recording():  # a sampled-out span drops attributes: skip building them
                record_decision(
                    span,
                    auth.verdict,
                    policy_id=self.policy.digest or None,
                    capability_id=identity.grant_id if identity else None,
                    chain_depth=len(identity.chain.links) if identity else None,
                    # A request asked again links the entry it recorded itself, if any: its
                    # first asking's span links the request's.
                    audit_index=auth._asked_entry if auth._asked_again else auth.audit_index,
                    # As the audit log keeps them: values the policy does not mark loggable hidden.
                    reason="; ".join(
                        redact_reasons(
                            auth.reasons, auth.call.args, self._loggable(auth.call), self._declared(auth.call)
                        )
                    )[:200]
                    or None,
                    findings=auth.findings,
                )
                # The name's first characters, as every name on a span; none for a caller that
                # proved no name (a gateway request whose invocation's signature does not verify).
                if identity is not None and identity.name:
                    record_agent_name(span, identity.name)
            yield span

    def _fail_after(
        self,
        span: Span,
        auth: Authorization,
        exc: BaseException,
        paused: Callable[[BaseException], bool] | None,
        started: bool,
        raised: list[BaseException],
        keyed: _Keyed | None,
    ) -> None:
        """``_fail`` of a ``run``/``arun`` that ``exc`` ended, given what its ``fn`` ``raised``:
        one that no attempt of its own entered and that ended with what a twin with its key
        (``keyed``) raised (``_raised_by_twin``) joined that twin and was handed its failure."""
        ran = _raised_by_fn(exc, raised)
        reused = not started and not ran and keyed is not None and self._raised_by_twin(keyed.ids, exc)
        self._fail(span, auth, exc, paused, started=started, ran=ran, reused=reused)

    def _raised_by_twin(self, ids: _TwinKey, exc: BaseException) -> bool:
        """Whether ``exc``, or the error it chains (``__cause__``: the scheduler's refusal of a
        retry after the tool failed), is one that the ``fn`` of a tool call with ``ids`` in flight
        raised, compared by identity (``_raised_by_fn``). A ``__cause__`` that cannot be read
        (a property that raises) is none: its error must not replace the call's own."""
        try:
            cause = exc.__cause__
        except Exception:
            cause = None
        seen = (exc,) if cause is None else (exc, cause)
        with self._runs_changed:
            same = self._same_ids.get(ids)
            return same is not None and same.raised_one_of(seen)

    def _fail(
        self,
        span: Span,
        auth: Authorization,
        exc: BaseException,
        paused: Callable[[BaseException], bool] | None,
        *,
        started: bool,
        ran: bool = False,
        reused: bool = False,
    ) -> None:
        """Settle a call that ``exc`` ended: ``paused`` if ``paused`` says so (LangGraph's
        ``interrupt()``: not a failure of the call, and its span says so; a ``paused`` that raises
        says it is not), else ``error``.
        ``started``: whether an attempt reached the call's function; a call that never did (the
        scheduler refused it, or its caller was cancelled while it waited for a slot) is
        recorded as not run, so a once-only call runs when its run is resumed. ``ran``: ``exc``
        came out of the call's function itself; a scheduler refusal it raised (a nested gated
        call's ``CircuitOpen``, after the call paid) is the call's failure, not a refusal of it.
        ``reused``: the scheduler handed the call the failure of its running twin, whose tool ran:
        settled as started (an approval it used is spent, as for a reused result), its reasons
        ending with ``RESULT_REUSED``. Until review R91 it was recorded as "given up before the
        call started", and an approval it used was pending again."""
        pause = says_pause(paused, exc)  # a ``paused`` that raises says no: the outcome is recorded
        reused = reused and not pause
        error = type(exc).__name__
        # A model call its function says it never sent did not start either (its reason stays
        # the class's name, which says so: no detail added).
        unsent = never_sent(auth, exc)
        started = reused or (started and not unsent and (ran or error not in NOT_STARTED))
        if (reason := _failure_reason(exc)) != error:  # why the backends failed
            error = reason
        elif not started and not pause and error not in NOT_STARTED and not unsent:
            error = f"{error}: {NOT_STARTED_DETAIL}"
        if isinstance(exc, SchedulingError) and isinstance(exc.__cause__, BaseException):
            # The scheduler gave up after a failed attempt and chained the tool's last error
            # (``tasks._failures._final_error``): the outcome names its class too, not its text,
            # as a tool's own error is recorded (until review R62 an outcome read ``CircuitOpen``
            # alone, and why the call failed was in the dead letter only).
            error = f"{error} (after {type(exc.__cause__).__name__})"
        usage = usage_after(auth, exc) if started else None
        # The span says what the outcome entry says (until review R60 a call that raised had only
        # ``error.type``, and spans filtered on ``agentgate.outcome=error`` missed it), with
        # ``error.type`` the exception's class name (its message is never exported).
        raised = None if pause else type(exc).__qualname__
        self._settle_traced(
            span,
            auth,
            "paused" if pause else "error",
            error,
            usage,
            started=started,
            reused=reused,
            error_type=raised,
        )

    def abandon(self, auth: Authorization, why: str = NOT_STARTED_DETAIL) -> None:
        """Settle an allow whose call will never run (its caller was cancelled between the
        decision and the run): an ``error`` outcome saying ``why``, its reservation released, a
        once-only call left as not run (a resumed run runs it), and the call's span, ERROR with
        ``error.type=CancelledError``. The allow cannot be used after.

        Raises ``Denied`` for a refusal or an allow already used (``run``, ``arun``, ``abandon``),
        ``InputError``, the allow left unused, for an ``auth`` that is not an ``Authorization``
        and for a ``why`` that is not text, as ``decline`` refuses its ``reason`` (until review
        R89 ``None`` was recorded as ``CancelledError: None``).
        """
        expect(why, str, "why", "text")
        self._check_allowed(auth)
        self._settle_not_run(auth, f"CancelledError: {why}", "CancelledError")

    def trace_allowed(self, auth: Authorization) -> None:
        """The span of an allow that no ``run`` of this Gate follows: a GPU lease or a renewal
        that ``GatedBroker`` hands to its broker, which settles it itself. ``{action} {resource}``
        (``lease gpu:h100``), ended at once with the decision on it and ``agentgate.audit.index``,
        its ``allow`` entry, as a refusal's span (until review R54 only refused leases had one).

        An entry is linked by one span, so this uses the allow up as ``run`` does: ``run``,
        ``arun`` and ``abandon`` refuse it afterwards (``Denied``, already used), whose spans
        would link the entry a second time. ``InputError``, and no span, for an ``auth`` that is
        not an allow this Gate decided, and for one already used (traced, run or abandoned: its
        entry has its span). Until review R55 a second call, or a ``run`` after it, made a second
        span of the same entry."""
        expect(auth, Authorization, "auth", _AUTHORIZATION)
        if not auth.allowed or auth.audit_index is None:
            raise InputError("only a recorded allow is traced by trace_allowed")
        if auth._use.sealed != self._seal(auth):
            raise InputError("only an allow this Gate decided is traced by trace_allowed")
        if not auth._use.take():
            raise InputError(
                f"the allow of {auth.call.resource} (audit entry {auth.audit_index}) was already used "
                "(traced, run or abandoned): its entry has its span"
            )
        with self._span(auth):
            pass

    def _settle_not_run(self, auth: Authorization, error: str, error_type: str) -> None:
        """Settle an allowed call that will not run (``abandon``, a ``run`` refused once ``close``
        began) as an ``error`` outcome saying ``error``, inside its span: the call's span with its
        decision, ended at once with that outcome and ``error.type`` the exception's class name
        (the spans of calls that run are made as they run), and ``agentgate.outcome.lost`` when
        the gate had closed, so that the outcome was not written. Settled inside the span, so an
        outcome the store then refuses says so on it (until review R68 it was settled before the
        span was made)."""
        with self._span(auth) as span:
            self._settle_traced(span, auth, "error", error, None, started=False, error_type=error_type)

    def _finish(
        self,
        span: Span,
        auth: Authorization,
        result: T,
        failed: Callable[[T], bool | BaseException] | None,
        spent: Callable[[T], tuple[int, int] | None] | None,
        *,
        reused: bool = False,
        forget: Callable[[T], None] | None = None,
    ) -> None:
        """Settle a call that ran and returned ``result``: ``spent`` reads its usage, ``failed``
        says whether it failed, or gives the exception it failed with: the call is then settled
        as an ``error`` at that usage, its reason ``_failure_reason`` of the exception, which is
        raised (a LangGraph model call whose structured answer could not be parsed: it ran and
        reported its usage; until review R60 it was charged as reserved, its outcome saying its
        usage could not be read). When either raises, the call is settled as an ``error`` charged
        as reserved (it ran; what it cost cannot be read), its reason ``_failure_reason`` (a
        LangGraph stream cut after output is such a ``spent``'s ``BackendFailed``: until review
        R59 its reason had no detail, where the gateway's for the same stream did), and the
        exception is re-raised; so is a ``failed`` that returns an exception class, with
        ``InputError`` (``_not_a_failure``), a ``failed`` or ``spent`` that returns a
        coroutine or other async work, closed unawaited (``_not_awaited``). Whatever else ``failed`` returns is read
        for its truth (``None`` is not failed): until review R85b a value that was neither a boolean nor
        an exception (numpy's ``bool_``, a return code) was refused as an exception class is.
        ``reused``: the scheduler returned the result of another call with the same idempotency
        key, and the tool did not run for this one: settled as it would be, charged as decided,
        and its outcome says so (``RESULT_REUSED``, its last reason, never part of another), as its
        span's ``agentgate.task.reused`` does. ``forget``: drops ``result`` from the scheduler's
        result cache, called before a call is settled as an ``error`` here: a later call with
        the same idempotency key (a retry, a resumed LangGraph node) runs the tool, as after a
        tool that raised (until review R91 it was handed the failed result, its tool never run
        again); what ``forget`` raises is logged and keeps nothing from being settled
        (``_forget_failed``)."""
        try:
            usage = spent(result) if spent is not None else None
            if unawaited(usage):
                raise _not_awaited("spent", usage)
            returned: object = failed(result) if failed is not None else False
            if unawaited(returned):
                raise _not_awaited("failed", returned)
            if isinstance(returned, type) and issubclass(returned, BaseException):
                raise _not_a_failure(returned)
            # Any other value is read for its truth (numpy's ``bool_``, a return code, ``None``),
            # inside the ``try``: one whose truth cannot be read is a ``failed`` that raised.
            failure = returned if isinstance(returned, BaseException) else bool(returned)
            status = "error" if failure else "ok"
        except BaseException as exc:
            _forget_failed(forget, result, auth)
            raised = type(exc).__qualname__
            self._settle_traced(
                span, auth, "error", _failure_reason(exc), USAGE_UNREAD, reused=reused, error_type=raised
            )
            raise
        # Usage the settlement reads as garbage (``_usage_counts``) is charged as reserved and
        # left off the span, which must not show a count the log refused.
        if span.is_recording() and (counts := _usage_counts(usage)) is not None:
            record_usage(span, *counts)
        if status == "error":
            _forget_failed(forget, result, auth)
        error_type = type(failure).__name__ if isinstance(failure, BaseException) else None
        reason = _failure_reason(failure) if isinstance(failure, BaseException) else None
        self._settle_traced(span, auth, status, reason, usage, reused=reused, error_type=error_type)
        if isinstance(failure, BaseException):
            raise failure

    async def to_thread(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking gate step (store I/O) off the event loop, keeping the context variables."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    @property
    def _shared_store(self) -> Store | None:
        """The store the schedulers share limits, breakers and dead letters through: PostgreSQL only.

        On PostgreSQL several gateway processes or hosts share one authority, so per-tool
        concurrency and rate limits must hold across them (leases that expire when a holder
        dies). The embedded SQLite default serves one process, where the in-process limits
        are exact and a durable lease write per call would only add latency.
        """
        return self.store if self.store.dialect == "postgresql" else None

    @property
    def _dead_letters(self) -> DeadLetterStore | None:
        """Where dead letters persist on the embedded store (PostgreSQL does it through ``store``)."""
        return DeadLetterStore(self.store) if self._shared_store is None else None

    def _sync(self) -> SyncScheduler:
        scheduler = self._sync_scheduler
        if scheduler is not None:
            return scheduler
        with self._scheduler_lock:
            if self._sync_scheduler is None:
                self._sync_scheduler = SyncScheduler(
                    store=self._shared_store,
                    dead_letters=self._dead_letters,
                    limits=self._limits,
                    registry=self.registry,
                )
            return self._sync_scheduler

    async def _async(self) -> Scheduler:
        """This event loop's scheduler. One per loop (an asyncio scheduler cannot be shared across
        loops), all admitting through the Gate's one SharedLimits, as the sync scheduler does. The
        first of a loop is made on a worker thread: making it creates tables (dead letters; leases,
        rate buckets and breakers on PostgreSQL), which may wait for another connection's lock,
        and the loop must go on meanwhile."""
        loop = asyncio.get_running_loop()
        scheduler = self._async_schedulers.get(loop)
        if scheduler is not None:
            return scheduler
        return await self.to_thread(self._async_for, loop)

    def _async_for(self, loop: asyncio.AbstractEventLoop) -> Scheduler:
        with self._scheduler_lock:
            scheduler = self._async_schedulers.get(loop)
            if scheduler is None:
                scheduler = self._async_schedulers[loop] = Scheduler(
                    store=self._shared_store,
                    dead_letters=self._dead_letters,
                    limits=self._limits,
                    registry=self.registry,
                )
            return scheduler

    def _check_allowed(
        self,
        auth: Authorization,
        fn: object = _NO_FN,
        paused: object = None,
        failed: object = None,
        spent: object = None,
        *,
        call_id: object = None,
        run_id: object = None,
        preemptible: object = True,
        began: object = None,
    ) -> None:
        """Refuse (``Denied``) a refusal, an allow this Gate did not decide (or one changed since),
        and an allow that was already used: one decision, one run. ``InputError`` first, the
        allow left unused, for an ``auth`` that is not an ``Authorization``, for an ``fn`` (the
        function ``run``/``arun`` is to run) that cannot be called, for a ``paused``,
        ``failed``, ``spent`` or ``arun``'s ``began`` that is neither None nor a plain function
        (the call's ``ToolCall`` refuses ``paused``; ``_fail`` calls it, and ``_finish`` the
        other two, after the tool ran, and ``arun`` ``began`` on a cancellation, reading what
        they return at once: until review R87 an async one's coroutine was read as a pause, a
        failure, or usage that could not be read, and until R87b an async ``began``'s as work
        that began), for a ``call_id`` or ``run_id`` that is neither None nor valid Unicode text (until
        review R56 a ``call_id`` of 123 raised ``TypeError`` as the call's span was made, the
        allow used up and its entry left with no outcome and no span), and for an ``arun``
        ``preemptible`` that is not True or False (until review R86 ``"false"`` was read as true:
        work no cancellation stops was cut at its timeout and recorded failed while it ran on).
        ``InputError`` too, the allow left unused, for a ``call_id`` or ``run_id`` other than the
        one the allow was decided with (``_expect_decided_ids``)."""
        expect(auth, Authorization, "auth", _AUTHORIZATION)
        _expect_id(call_id, "call_id")
        _expect_id(run_id, "run_id")
        if fn is not _NO_FN and not callable(fn):
            raise InputError(f"fn must be the function that makes the call, got {shown(fn)}")
        for name, given, of in (
            ("paused", paused, "an exception"),
            ("failed", failed, "the result"),
            ("spent", spent, "the result"),
            ("began", began, "no arguments"),
        ):
            if given is not None and not callable(given):
                raise InputError(f"{name} must be a function of {of} or None, got {shown(given)}")
            if given is not None and _is_async_function(given):
                raise InputError(
                    f"{name} must be a plain function of {of}, got an async function: what it "
                    "returns is read at once, never awaited"
                )
        expect(preemptible, bool, "preemptible", "True or False")
        if not auth.allowed or auth.audit_index is None:
            refused = ApprovalRequired if auth.needs_approval else Denied
            raise refused(self.explain_redacted(auth), auth.decision)
        if auth._use.sealed != self._seal(auth):
            raise Denied(
                f"the authorization of {auth.call.resource} was not decided by this Gate (built by hand, "
                "changed after the decision, or another Gate's): decide the call with Gate.authorize",
                auth.decision,
            )
        _expect_decided_ids(auth, call_id, run_id)
        if not auth._use.take():
            raise Denied(
                f"the authorization of {auth.call.resource} (audit entry {auth.audit_index}) was already "
                "used: an allow runs its call once; decide the call again",
                auth.decision,
            )
