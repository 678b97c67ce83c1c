"""``Gate``: the composition root (the package docstring, ``agentgate.gate``, tells one call's
path through it): its making, ``close``, the decision (``authorize``) and the evidence; the rest
it inherits from its parts, one module each (``_delegation``, ``_approval_gates``, ``_recording``,
``_costs``, ``_running``, ``_settlement``, ``_dispatching``)."""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from opentelemetry.trace import Span, Tracer
from prometheus_client import CollectorRegistry

from agentgate._names import agent_name_refused
from agentgate._shown import quoted
from agentgate.audit.entry import argument_digest
from agentgate.audit.spans import ends_held, get_tracer
from agentgate.authority import (
    ApprovalRequirement,
    Authority,
    Chain,
    Decision,
    GrantRepository,
    Invocation,
)
from agentgate.capabilities import Call
from agentgate.errors import Denied, InputError, PolicyError, TokenFormatError
from agentgate.findings import Finding
from agentgate.gate._approval import Approval
from agentgate.gate._approval_gates import _Approvals
from agentgate.gate._authorization import (
    COVERAGE_CODES,
    AgentIdentity,
    Authorization,
    Verdict,
    expect,
    listed,
    revoked_refusal,
    shown,
)
from agentgate.gate._checks import (
    _IDENTITY,
    _IDENTITY_OR_NONE,
    _NAME_HINT,
    _NO_CHAIN,
    _NONE,
    _OWN_NAME,
    _expect_asked_in,
    _expect_id,
    _is_ascii_pair,
    granted_elsewhere,
    inherited_identity,
    principals_named,
    renamed_identity,
    several_principals,
)
from agentgate.gate._config import scheduler_config
from agentgate.gate._costs import _Costs, _token_estimate
from agentgate.gate._delegation import _Delegation
from agentgate.gate._dispatching import _Dispatching
from agentgate.gate._lock import _serialized
from agentgate.gate._outcomes import PendingOutcomes
from agentgate.gate._policy_chain import PolicyChains
from agentgate.gate._recording import _Recording
from agentgate.gate._records import ran_before
from agentgate.gate._running import _plain_id, _Running, _SameIds, _TwinKey
from agentgate.gate._settlement import _Settlement
from agentgate.keys import PublicKey, SigningKey
from agentgate.policy import Outcome, Policy, PolicyDecision, PolicyIndex, load_policy
from agentgate.store import Store, Transaction, open_store
from agentgate.store.agent_names import AgentNames
from agentgate.store.approvals import ApprovalStore
from agentgate.store.audit import AuditLog, VerifyReport, log_origin, open_log_key, previous_log_keys
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import RUN_AGAIN, OnceCalls, OnceState
from agentgate.store.quotas import QuotaCounter
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    idempotency_key,
)
from agentgate.tasks._scheduler import _drain_timeout
from agentgate.tasks._sync import wait_until

# The dispatcher brings aiohttp, httpx and the GPU inventory: a gate without one never loads them.
if TYPE_CHECKING:
    from agentgate.dispatch.dispatcher import Dispatcher

_log = logging.getLogger("agentgate.gate")

#: How often ``Gate.close`` looks again whether the event loop of a call it waits for was closed.
_CLOSED_LOOP_POLL_S = 0.05


# The approval gate the policy set for the call being decided in this context: the authority
# engine asks its hook after verifying the chain and before reading revocation.
_pending_approval: ContextVar[ApprovalRequirement | None] = ContextVar(
    "agentgate_pending_approval", default=None
)


def _approval_hook(call: Call, chain: Chain, invocation: Invocation | None) -> ApprovalRequirement | None:
    return _pending_approval.get()


_OPEN_GATES: weakref.WeakSet[Gate] = weakref.WeakSet()
"""The gates made and not closed (a dropped one leaves by itself), for ``_flush_at_exit``."""


def _flush_at_exit() -> None:
    """At interpreter exit, commit the outcomes the gates that were never closed still hold: the
    thread that would have committed them is a daemon and dies with the interpreter (a program
    that ends without ``Gate.close()`` lost its last call's outcome, and that call's reservation
    stayed held). A failure is logged (``Gate.flush`` logs its own). One registration for every
    gate: one per gate kept a slot per gate ever made (``atexit.unregister`` frees none)."""
    for gate in list(_OPEN_GATES):
        try:
            gate.flush()
        except Exception:
            _log.exception("agentgate: the outcomes pending at exit could not be committed")


atexit.register(_flush_at_exit)


class Gate(_Delegation, _Approvals, _Recording, _Costs, _Running, _Settlement, _Dispatching):
    """Answers tool and model calls for agent identities: decide, reserve, audit, run, settle.

    Thread-safe; one per process and policy. ``Gate.open`` builds one from files with the
    embedded defaults (SQLite under ``.agentgate/``, the log key beside it). ``registry``: the
    Prometheus registry every scheduler of the gate exports its metrics to (docs/tasks.md,
    "Visibility"); a new one by default, ``Gate.registry`` either way. ``tracer``: the
    OpenTelemetry tracer of its spans, else the globally installed provider's. ``InputError``,
    naming the parameter and opening nothing, for any argument of the wrong type.
    """

    def __init__(
        self,
        policy: Policy,
        store: Store,
        *,
        trust_anchors: Iterable[PublicKey | str] | None = None,
        log_key: SigningKey | None = None,
        scheduler: SchedulerConfig | None = None,
        tracer: Tracer | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        expect(policy, Policy, "policy", "a Policy (load_policy, parse_policy; Gate.open takes a file)")
        expect(store, Store, "store", "a Store (open_store, SQLiteStore)")
        expect(log_key, (SigningKey, _NONE), "log_key", "a SigningKey or None")
        expect(scheduler, (SchedulerConfig, _NONE), "scheduler", "a SchedulerConfig or None")
        # Until review R89 these two were taken as given: a wrong registry failed every tool call
        # after its allow was recorded (its scheduler refused it), a wrong tracer lost every span.
        expect(
            tracer, (Tracer, _NONE), "tracer", "an OpenTelemetry Tracer (TracerProvider.get_tracer) or None"
        )
        expect(
            registry, (CollectorRegistry, _NONE), "registry", "a prometheus_client CollectorRegistry or None"
        )
        anchors = (
            listed(trust_anchors, "trust_anchors", "public keys or did:key strings", TokenFormatError)
            if trust_anchors is not None
            else [d for d in policy.anchor_dids.values() if d]
        )
        self.policy = policy
        self.registry = registry if registry is not None else CollectorRegistry()
        self.tracer = tracer or get_tracer()
        self._global_tracer = tracer is None
        self.store = store
        self.index = PolicyIndex(policy)
        self._policy_chains = PolicyChains(self.index)
        """The policy's verdict on each chain presented (its root's lifetime, its delegations),
        computed once per chain: the policy does not change under a Gate."""
        # What can refuse (the log key, the environment, the scheduler's settings) comes before
        # the grants' own connection is opened: a gate that cannot be made leaves nothing open.
        # The origin and rotated-out keys of the environment, as the CLI's: the gate's checkpoints
        # and ``agentgate audit checkpoint``'s are one log's (docs/operations.md, The log key).
        self.audit = AuditLog(
            store, log_key or open_log_key(store), log_origin(), previous_keys=previous_log_keys()
        )
        self._config = scheduler or scheduler_config(policy)
        # Refused now, not at the first call: the Gate's schedulers use the default classifier.
        self._config.check_error_classes(DEFAULT_CLASSIFIER.classes)
        self.ledger = BudgetLedger(store)
        self.quotas = QuotaCounter(store)
        self.once = OnceCalls(store)
        self.approvals = ApprovalStore(store)
        self.grants = GrantRepository(store)
        try:
            self.authority = Authority(self.grants, anchors, approvals=_approval_hook)
        except BaseException:  # a trust anchor that is no key
            self.grants.close()
            raise
        self._store_lock = threading.RLock()
        self._outcomes = PendingOutcomes(self._write_outcomes, tick=self.flush)
        self._outcome_refused_at: dict[int, float] = {}  # id() of an outcome's allow -> its first refusal
        # id() of a pending outcome's allow -> its call's span (``_Settlement._span_refused``)
        self._outcome_spans: dict[int, Span] = {}
        # id() of an outcome's allow -> its entry's (index, time), while its commit is not known
        self._outcome_at: dict[int, tuple[int, str]] = {}
        # id() of an allow whose decision's commit is not known -> it, the lost connection's
        # server process and its entry's time (``_Settlement._settle_unknown``), until read back
        self._decided_unknown: dict[int, tuple[Authorization, int, str | None]] = {}
        _OPEN_GATES.add(self)
        self._limits = SharedLimits(self._config)
        """One set of limits for every scheduler below: a policy's limits are the Gate's."""
        self._sync_scheduler: SyncScheduler | None = None
        self._async_schedulers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scheduler] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        """Guards the in-memory bookkeeping below; taken inside decision transactions, so never
        held while waiting for the store (that order would deadlock against a decision)."""
        self._scheduler_lock = threading.Lock()
        """Guards making the schedulers, which may create tables: store I/O, so not ``_lock``."""
        self._runs_changed = threading.Condition(threading.Lock())
        """Guards the fields below (``run``/``arun`` in flight, for ``close``)."""
        self._runs = 0
        self._loop_runs: dict[asyncio.AbstractEventLoop, int] = {}
        """``arun`` calls in flight per event loop (``close`` cannot wait for its own loop's)."""
        self._same_ids: dict[_TwinKey, _SameIds] = {}
        """Tool calls in flight per ids the scheduler may join them by (``_Running._fail_after``)."""
        self._closing = False
        self._outcomes_closed = False
        self._dispatch: tuple[Dispatcher, asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._dispatch_lock = threading.RLock()  # a signal handler's close re-enters it
        self._dispatch_closed = False
        self._dispatch_attaching = False
        self._open_requests: dict[str, tuple[str, int | None, float]] = {}
        """Approval requests asked in this process and not yet answered: request id -> (call hash,
        audit index, expiry); expired ones leave at a later request (within ``DELEGATIONS_PURGE_S``).
        Keyed by the request, as the store is: the same call asked in two threads has two requests
        (``approval_calls``), and until review R56 one thread's asking evicted the other's."""
        self._requests_purge_at = 0.0
        self._delegations: list[tuple[str, AgentIdentity]] = []
        """What ``delegations`` reads: (parent agent name, sub-agent identity) for the delegations
        this gate made, in order; an expired one leaves at a later delegation (within
        ``DELEGATIONS_PURGE_S``), a revoked one (its grant or an ancestor's) once the revocation
        is committed through this gate or read by ``delegations``, and past ``DELEGATIONS_KEPT``
        the oldest."""
        self._agent_names: dict[str, frozenset[str]] = {}
        """How each agent name this Gate granted reads (``_confusables.readings``), the latest
        granted last (``_Delegation._remember_name``; at most ``AGENT_NAMES_KEPT``)."""
        self._name_readings: dict[str, tuple[int, str]] = {}
        """Each key of ``_agent_names`` to when the name that holds it was first granted on the
        store (``AgentNames.claim``) and that name: what ``_read_alike`` looks up, in that order."""
        self._names_on_store: AgentNames | None = None
        """The store's record of the agent names granted (``_Delegation._names_part``), opened at
        the first grant of a name this Gate has not granted."""
        self._purge_at = 0.0
        """When ``delegations`` next needs a pass for expired entries (``time.time()``)."""
        self._recorded_chains: set[str] = set()
        """The chain tips this Gate knows recorded in its grant store (``_record_chain``)."""
        self._parsed_delegated: dict[str, Chain] = {}
        """``parse_chain`` of the tokens ``_delegated_before`` read (bounded): a chain is a pure
        function of its token, and every delegation from a grant reads all of that grant's live
        delegations to its sub-agent again."""

    @classmethod
    def open(
        cls,
        policy: str | Path,
        store: str | Path | None = None,
        *,
        key_dir: str | Path | None = None,
        create_store: bool = True,
    ) -> Gate:
        """A gate over a policy file and a store: a URL or a SQLite file's path (``AGENTGATE_STORE``,
        else ``.agentgate/agentgate.db``), created if missing unless ``create_store`` is false
        (``open_store(create=False)``: a service deciding against a store in use, whose
        revocations and budgets a new, empty store would not hold).

        Raises ``PolicyError`` for a policy that cannot be loaded (or a ``policy`` that is no
        path), ``StoreError`` for a store that cannot be opened (``NoStore`` for one that does
        not exist, with ``create_store=False``), ``InputError`` for a ``store`` that is neither
        text nor a path, a ``key_dir`` that is no path, or a ``create_store`` that is no bool.
        """
        expect(policy, (str, os.PathLike), "policy", "the path of a policy file", PolicyError)
        expect(store, (str, os.PathLike, _NONE), "store", "a store URL, a path or None")
        expect(key_dir, (str, os.PathLike, _NONE), "key_dir", "a directory path or None")
        expect(create_store, bool, "create_store", "True or False")
        loaded = load_policy(policy, key_dir=key_dir)
        opened = open_store(store, create=create_store)
        try:
            return cls(loaded, opened)
        except BaseException:  # a gate that cannot be made (a log key others can read...) keeps nothing open
            opened.close()
            raise

    def close(self, *, timeout_s: float | None = 30.0) -> None:
        """Stop taking calls, let the calls in progress settle, then stop the scheduler and
        dispatcher threads, commit every pending outcome and close the store. Idempotent.

        From the start of ``close``, ``run``/``arun`` refuse new calls and calls still waiting for
        a slot (in any scheduler of the gate) with ``SchedulingError``; both are recorded as
        ``error`` outcomes and their reservations released. Calls running are waited for, at
        most ``timeout_s`` seconds, so that their outcomes are recorded; a call still running
        after that is logged, and its outcome is lost if it has not ended when ``close`` returns
        (its reservation stays held, so a budget is never overspent). Called from an event
        loop's thread, it cannot wait for that loop's own ``arun`` calls (they cannot progress
        while it blocks): their outcomes are lost too; close the gate after they end, or from
        another thread. Nor does it wait for ``arun`` calls whose event loop was closed under them
        (``loop.close()`` cancels no task: they never end): logged, their outcomes lost and their
        reservations held as those of calls still running when it returns, and their slots
        given back (``SharedLimits.reclaim_closed``). Whatever its last commit of outcomes raises
        (Ctrl-C), the spans of the outcomes left unwritten end, saying so, and the store is closed
        before it is raised.
        Ctrl-C while it waits for the calls running ends that wait as ``timeout_s`` would: the
        gate is closed, then it is raised.

        ``timeout_s`` is read as ``SyncScheduler.close`` reads it (``_drain_timeout``): None,
        infinity or an integer too large for a float waits until the calls settle, 0 or less not
        at all; a finite bound of any size is waited in steps, as ``SyncScheduler.close`` waits
        (``wait_until``: until review R87b one past the platform's time_t, 1e10, raised
        ``OverflowError`` with a call in flight, its outcome lost). ``InputError``, before
        anything is closed, for a value that is not a number (a bool, text) or is NaN, on a
        closed gate too, as ``SyncScheduler.close`` refuses it (until review R87 ``"5"`` raised
        a bare ``TypeError`` with the gate marked closing: every later ``close`` returned at
        once, the store was never closed and decisions went on being written).
        """
        try:
            bound = _drain_timeout(timeout_s)
        except InputError as exc:
            raise InputError(f"Gate.close: {exc}") from None
        with self._runs_changed:
            if self._closing:
                return
            self._closing = True
        self._limits.refuse_waiting("the gate is closing: the call was not started")
        deadline = None if bound is None else time.monotonic() + bound
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        interrupted: BaseException | None = None
        with self._runs_changed:
            settled = False
            try:
                settled = self._wait_runs(here, deadline)
            except BaseException as exc:  # Ctrl-C: it ends the wait as the timeout does
                # The gate is closed all the same, then it is raised: until review R70 it left
                # the threads running and the store open, and a second close() (the gate was
                # closing already) did nothing.
                interrupted = exc
                deadline = time.monotonic()
            if self._runs:
                if interrupted is not None:
                    why = f"its wait was interrupted ({type(interrupted).__name__})"
                elif settled:  # what is left are this loop's own calls, and those of closed loops
                    dead = sum(count for loop, count in self._loop_runs.items() if loop.is_closed())
                    reasons = []
                    if self._runs > dead:
                        reasons.append(
                            "arun calls of the event loop it was called from, which cannot progress "
                            "while it waits"
                        )
                    if dead:
                        reasons.append(f"{dead} arun calls of event loops closed under them, which never end")
                    why = "; ".join(reasons)
                else:
                    why = f"it waited {bound:g}s"
                _log.error(
                    "agentgate: %d calls had not settled when close() stopped waiting (%s); the "
                    "outcomes of those still running when it returns will not be recorded",
                    self._runs,
                    why,
                )
        try:
            if self._sync_scheduler is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._sync_scheduler.close(timeout_s=left)
            with self._limits.lock:  # the slots of calls of loops closed under them go back
                self._limits.reclaim_closed()
            self._limits.close()
            # Each event loop's scheduler: its loop may be another thread's, or gone, so its
            # leases are given back from here (their heartbeat would outlive the store).
            with self._scheduler_lock:
                schedulers = list(self._async_schedulers.values())
            for scheduler in schedulers:
                scheduler.release_leases()
            self._close_dispatcher()
        finally:  # whatever stopping the threads raised, the outcomes are committed
            self._outcomes.close()
            # Outcomes are taken until this last commit: a call refused while the threads stopped
            # (an allow decided in another thread just before) is recorded and its reservation
            # released. A decision waits for the store lock, then finds the store closed.
            # The spans of outcomes found lost here end once the lock is released (``ends_held``).
            with ends_held(), self._store_lock:
                with self._runs_changed:
                    self._outcomes_closed = True
                try:
                    self.flush()
                except BaseException as exc:  # Ctrl-C, a SIGTERM handler's exit, anything unforeseen
                    self._close_store(type(exc).__name__)
                    raise
                self._close_store(None)
        if interrupted is not None:
            raise interrupted

    def _wait_runs(self, here: asyncio.AbstractEventLoop | None, deadline: float | None) -> bool:
        """``close``'s wait (``_runs_changed`` held) until the ``run``/``arun`` calls in flight have
        settled, but for those that cannot: the ``arun`` calls of ``here`` (the loop that called
        ``close``, which cannot progress while it waits) and of event loops closed under them (no
        task of such a loop runs again: until review R95 ``close`` waited its whole ``timeout_s``
        for them). True once only such calls are left; False when the monotonic ``deadline``
        passed first (None: none). Nothing tells it of a loop closed while it waits: while calls
        of other loops run, it looks again every ``_CLOSED_LOOP_POLL_S``. In steps (until review
        R87b a bound past time_t, 1e10, raised ``OverflowError``: ``wait_until``)."""

        def settled() -> bool:
            left = self._runs
            for loop, count in self._loop_runs.items():
                if loop is here or loop.is_closed():
                    left -= count
            return left <= 0

        while True:
            polled = any(loop is not here for loop in self._loop_runs)
            until = deadline
            if polled:
                poll = time.monotonic() + _CLOSED_LOOP_POLL_S
                until = poll if deadline is None else min(poll, deadline)
            if wait_until(self._runs_changed, settled, until):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _close_store(self, failure: str | None) -> None:
        """The end of ``close``, once its last commit of outcomes is done (``failure``: the class
        name of what that commit raised, which ``close`` raises then): the spans of the outcomes
        still pending say they were not written and end, and the store is closed. Until review
        R70 an exception that was not an agentgate error (Ctrl-C in that commit) left those spans
        unended, never exported, and the store open. The store is closed whatever the steps
        before raise (a second Ctrl-C as the loss is logged: until review R70 it stayed open, and
        a second ``close()`` did nothing)."""
        try:
            lost = self._outcomes.take()  # put back by a commit that failed: nothing will take them
            self._spans_lost(lost, failure)
            if lost:
                _log.error(
                    "agentgate: %d outcomes not recorded: the store failed as the gate closed%s",
                    len(lost),
                    f" ({failure})" if failure else "",
                )
        finally:
            _OPEN_GATES.discard(self)
            try:
                self.grants.close()
            finally:
                self.store.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tenant_of(self, did: str) -> str:
        name = self.index.principal_name(did)
        principal = self.policy.document.principals.get(name) if name else None
        return principal.tenant if principal and principal.tenant else "default"

    def tenant_of(self, identity: AgentIdentity) -> str:
        """The tenant whose quotas and fair share ``identity``'s calls count against, from the policy.

        The tenant of the principal the identity's calls are judged as (``_principal_of``);
        ``default`` when the policy gives that principal none. Never
        ``identity.tenant``, a field any caller could set on its own copy. ``InputError`` for an
        ``identity`` that is not an ``AgentIdentity``.
        """
        expect(identity, AgentIdentity, "identity", _IDENTITY)
        return self._tenant_of(self._policy_principal(identity))

    def _principal_of(self, did: str, chain: Chain) -> str:
        """The principal the caller ``did`` holding ``chain`` is judged and counted as: itself when
        the policy names it; else (a sub-agent's key made at run time) the principal its chain
        was first issued to, whose grant it narrows."""
        return did if self.index.principal_name(did) is not None else chain.root.audience

    @_serialized
    def authorize(
        self,
        identity: AgentIdentity | None,
        call: Call,
        *,
        agent: str | None = None,
        agent_did: str | None = None,
        approval: Approval | None = None,
        tokens: tuple[int, int] | None = None,
        call_id: str | None = None,
        run_id: str | None = None,
        asked_in: tuple[str, str] | None = None,
        approval_gates: bool = True,
        prompt_most: int | None = None,
    ) -> Authorization:
        """Decide ``call`` for ``identity`` and record the decision before anything runs.

        ``agent``/``agent_did``: the agent the caller runs as; an identity that belongs to another
        agent is refused (``implicit_trust_inheritance``). ``tokens``: (prompt, max output) for a
        model call, to reserve its cost; without it, a model call on a ``tokens`` or
        ``usd_micros`` budget, or counted by a quota in those units, is a recorded refusal.
        ``call_id``: the framework's id for the call, which binds an approval request to this very
        call. ``run_id``: the run (a LangGraph thread and task)
        the call belongs to, else the grant. A call of a tool the policy does not mark idempotent
        that has a ``call_id`` runs once: the same call (run, call id, arguments) decided again
        after it ran, or after its process stopped while it ran, is refused, also after a restart
        (``store.once``). ``asked_in``: ``(scope, version)``, where a call id names one call
        across edits of what asked for it (a LangGraph thread and its outer tasks) and that
        version (the answer's id and a digest of its tool calls): a call that needs an approval
        closes the requests open for the same call id in the same scope that were asked in
        another version (the answer was edited or replaced, ``update_state``: no run will make
        those calls). Never raises for a refused call; raises ``AuditError``/``StoreError`` only
        if even the refusal cannot be recorded (then nothing runs). Raises ``InputError``,
        writing nothing, for arguments of the wrong type (an ``identity`` that is neither an
        ``AgentIdentity`` nor ``None``, a ``call`` that is not a ``Call``, a ``call_id`` or
        ``run_id`` that is not valid Unicode text, an ``asked_in`` that is not a pair of it: until
        review R89 a lone surrogate there raised ``StoreError`` after a vote towards a quorum was
        committed) and for ``tokens`` that are not two token
        counts, whatever the call and whatever its decision would be (until review R85 a tool
        call's were not checked: garbage was recorded as allowed, or asked an approval). An
        ``approval`` that is not an ``Approval`` (``Approval.parse`` reads a resume value) is a
        recorded refusal. ``approval_gates=False``: the call continues one that its approval was
        given for (a GPU lease's renewal, ``GatedBroker.renew``), so the policy's approval gates
        are not asked again; everything else is decided as always. ``prompt_most``: for a model
        call, the most prompt tokens its outcome is charged, whatever its backend reports
        (``Authorization.prompt_tokens``: ``dispatch.prefix.prompt_tokens_most`` of the payload it
        sends; ``InputError`` for one that is not a non-negative integer).
        """
        # The hot path: isinstance checks against module-level tuples and ASCII ids, nothing
        # allocated; ``_check_decision`` (also for ids beyond ASCII, which it encodes to check)
        # names the argument only when one is wrong.
        if not (
            isinstance(call, Call)
            and isinstance(identity, _IDENTITY_OR_NONE)
            and (call_id is None or (isinstance(call_id, str) and str.isascii(call_id)))
            and (run_id is None or (isinstance(run_id, str) and str.isascii(run_id)))
            and (asked_in is None or _is_ascii_pair(asked_in))
        ):
            self._check_decision(identity, call, call_id, run_id, asked_in)
        # The ids as plain text: the decision binds its approval request, its once-only key and
        # the run's ids to their characters, which a ``str`` subclass's own equality must not
        # change (``_expect_decided_ids``; until review R91c a decided id kept its subclass).
        call_id, run_id = _plain_id(call_id), _plain_id(run_id)
        if prompt_most is not None and (type(prompt_most) is not int or prompt_most < 0):
            raise InputError(f"prompt_most must be a non-negative integer, got {quoted(prompt_most)}")
        if tokens is not None:
            # Checked for every call, before anything is written: until review R85 only an allowed
            # model call's were (``_cost``), so garbage on a tool call was recorded as allowed, or
            # opened an approval request.
            tokens = _token_estimate(tokens)
        # A refusal closes the call's own approval request, never another run's: the same call
        # asked in another thread is another call (``_call_scope``).
        early = self._precheck(identity, call, agent, agent_did)
        if early is not None:
            return self._record_refusal(
                early, call_id, call_key=self._call_scope(identity, call_id, asked_in)
            )
        assert identity is not None
        if approval is not None and not isinstance(approval, Approval):
            return self._refuse_unreadable_approval(identity, call, approval, call_id)
        verdict = self._policy_verdict(identity, call)
        # A chain made outside the Gate never met the policy's bounds on root grants and
        # delegations: refused here, before anyone is asked to approve a call on it.
        fault = self._policy_chains.fault(identity.chain) if verdict.outcome is not Outcome.DENY else None
        if verdict.outcome is Outcome.DENY or fault is not None:
            return self._refuse_against_policy(identity, call, verdict, fault, call_id, asked_in)
        try:
            request = self._approval_request(identity, call, verdict, call_id) if approval_gates else None
        except InputError as exc:  # arguments with no digest (text that is not valid Unicode)
            refused = Authorization(
                Verdict.DENY, call, identity, (f"the call's arguments cannot be recorded: {exc}",)
            )
            return self._record_refusal(
                refused, call_id, call_key=self._call_scope(identity, call_id, asked_in)
            )
        rule = self._quorum_rule(verdict.approval, identity.did)
        call_key = self._scoped_call_key(identity, call_id, asked_in) if request is not None else None
        scope = None if call_key is None else call_key[0]
        # A vote towards a quorum above one is recorded before the decision (a transaction of its
        # own): as at the gateway, none is recorded for a call the authority refuses, asked in
        # that transaction; the decision below then refuses the call for the authority's reason.
        approved, unused, pending = (
            self._approval_state(
                approval,
                request,
                rule,
                verdict.approval,
                identity,
                scope,
                refusal=functools.partial(self._authority_refusal_in, identity, call),
            )
            if request is not None
            else (None, (), None)
        )
        # The Gate holds the agent's key: the authority engine decides with it in hand
        # (``decide_held``), without signing an invocation only to verify it at once; a caller in
        # another process signs one (the gateway). One transaction, one commit per decision: the
        # revocation read runs in it (``GrantRepository.within``), with the outcomes carried from
        # earlier calls, the budget reservation and the decision's audit entry. Nothing of an
        # allow is visible, and the call does not run, before that commit.
        with self._decision_transaction() as tx:
            with self.grants.within(tx):
                token = _pending_approval.set(pending)
                try:
                    decision = self.authority.decide_held(identity.key, identity.chain, call)
                finally:
                    _pending_approval.reset(token)
            auth = Authorization(
                decision.outcome.value,
                call,
                identity,
                (*verdict.reasons, *decision.reasons, *unused)
                if decision.outcome.value != Verdict.DENY
                else decision.reasons,
                decision.findings,
                decision=decision,
                rule=f"role {verdict.rule.role} rule {verdict.rule.index + 1}"
                if verdict.rule is not None
                else None,
                call_id=call_id,
                run_id=run_id,
            )
            once = (
                self._once_key(identity, call, decision, call_id, run_id)
                if auth.verdict != Verdict.DENY
                else None
            )
            if (
                once is not None
                and (last := self.once.last(tx, once)) is not None
                and last[0] not in RUN_AGAIN
            ):
                # Refused before a person is asked to approve a call that cannot run again.
                auth = self._refuse_ran_before(auth, once, last)
            uncounted = self._refused_approval(approval, request, rule, scope, tx)
            if (
                auth.needs_approval
                and not uncounted
                and approval is not None
                and request is not None
                and self.approvals.used(approval.request, request["call_hash"], tx=tx)
            ):
                # The vote was counted before this transaction (``_approval_complete``), with the
                # quorum not yet met; another process's call met it and used the request since.
                # Refused as that used approval is, not asked anew: until review R64 a new request
                # was opened for a call already approved and run, and left pending.
                used = Denied(f"approval {approval.request} was already used")
                auth = self._ask_again_if_not_run(
                    auth, used, approval, request, rule, once, tx
                ) or self._refuse_unheld_allow(auth, used, None, {}, approval, request, tx)
            elif auth.needs_approval:
                auth = self._record_approval_request(auth, request, rule, tx, call_key, uncounted=uncounted)
            elif auth.allowed:
                auth = self._record_allow(
                    auth, approved, request, tokens, tx, verdict.quotas, once, rule, prompt_most
                )
            else:
                with self.grants.within(tx):  # read here: an allow's path reads nothing more
                    revoked = self._revoked_instead(decision, call, identity)
                if revoked is not None:
                    auth = replace(revoked, rule=auth.rule)
                own = self._call_scope(identity, call_id, asked_in)  # also without an approval gate now
                auth = self._write_refusal(auth, tx, ref=self._close_asked(auth, call_id, tx, own))
        if not auth.allowed:
            self._refusal_span(auth, call_id)
        return auth

    def _refuse_against_policy(
        self,
        identity: AgentIdentity,
        call: Call,
        verdict: PolicyDecision,
        fault: Finding | None,
        call_id: str | None,
        asked_in: tuple[str, str] | None,
    ) -> Authorization:
        """Record the refusal of a call the policy refuses: its verdict denies, or ``fault``, the
        chain is outside its bounds (``PolicyChains``). As the gateway answers (authentication
        before authorization), a call the authority engine refuses too is refused for the
        engine's reason: a chain forged, broken, from no trust anchor, expired or not yet valid,
        revoked, or whose tip does not cover the call (``_revoked_instead``), whatever the policy
        also refuses; else for the policy's (until review R59 the policy's reasons came before
        every refusal of the engine's but the chain's verification). Asked only of a call the
        policy refuses: an allowed call's chain is decided once, by ``authorize``'s own decision.
        The engine's approval hook answers ``None`` here (no approval gate is pending), so no
        approval is ever asked for such a call. One transaction (``_record_refusal``'s
        ``authority_first``): revocation is read in it, with the refusal's entry and the closing
        of the call's approval request."""
        refused = (
            Authorization(Verdict.DENY, call, identity, verdict.reasons)
            if fault is None
            else Authorization(Verdict.DENY, call, identity, (fault.message,), (fault,))
        )
        return self._record_refusal(
            refused, call_id, call_key=self._call_scope(identity, call_id, asked_in), authority_first=True
        )

    def _refused_by_authority(self, identity: AgentIdentity, call: Call) -> Authorization | None:
        """The authority engine's refusal of ``call`` for ``identity`` (``_revoked_instead`` of a
        call not covered on a revoked chain), or ``None`` when it allows it. Asked with no approval
        gate pending (the engine's hook answers ``None``), so it asks for no approval. Reads
        revocation through ``self.grants`` (in the transaction bound to it, if any)."""
        decision = self.authority.decide_held(identity.key, identity.chain, call)
        if decision.outcome.value != Verdict.DENY:
            return None
        return self._revoked_instead(decision, call, identity) or Authorization(
            Verdict.DENY, call, identity, decision.reasons, decision.findings, decision=decision
        )

    def _authority_refusal_in(self, identity: AgentIdentity, call: Call, tx: Transaction) -> str | None:
        """Why the authority engine refuses ``call`` for ``identity``, revocation read in ``tx``
        (``_refused_by_authority``); ``None`` when it does not."""
        with self.grants.within(tx):
            refused = self._refused_by_authority(identity, call)
        return None if refused is None else "; ".join(refused.reasons)

    def _revoked_instead(
        self, decision: Decision, call: Call, identity: AgentIdentity
    ) -> Authorization | None:
        """The refusal ``revoked`` (``revoked_refusal``) of a call the authority engine refused only
        because the chain's tip does not cover it (``COVERAGE_CODES``) when a link of the chain is
        revoked, as the gateway answers it: the engine checks coverage before it reads revocation,
        and a revoked grant is refused for that whatever it asks for. ``None`` for any other
        decision. Reads revocation through ``self.grants`` (in the
        decision's transaction when bound to one); raises ``StoreError`` when it cannot be read."""
        if decision.outcome.value != Verdict.DENY or not decision.findings:
            return None
        if any(f.code not in COVERAGE_CODES for f in decision.findings):
            return None
        revoked = self.grants.revoked(identity.chain.ids)
        return revoked_refusal(decision, call, identity, revoked) if revoked else None

    def _refuse_unreadable_approval(
        self, identity: AgentIdentity, call: Call, approval: object, call_id: str | None
    ) -> Authorization:
        """Record the refusal of a call whose ``approval`` is not an ``Approval``."""
        reason = (
            f"approval must be an Approval, got {shown(approval)}: read a resume value with Approval.parse"
        )
        # A caller's mistake, not an answer to the request: the request stays open.
        refused = Authorization(Verdict.DENY, call, identity, (reason,))
        return self._record_refusal(refused, call_id, close_asked=False)

    @staticmethod
    def _refuse_ran_before(auth: Authorization, once: str, last: tuple[OnceState, int]) -> Authorization:
        """``auth`` turned into the refusal of a call that must run once and has run (or started)."""
        # A call that ran to completion keeps its key: an integration may hold its answer.
        ran = once if last[0] == "ok" else None
        return replace(auth, verdict=Verdict.DENY, reasons=(ran_before(auth.call, *last),), once_key=ran)

    def _once_key(
        self, identity: AgentIdentity, call: Call, decision: Decision, call_id: str | None, run_id: str | None
    ) -> str | None:
        """The idempotency key under which a call that must run once is recorded, or ``None``
        for a model call, a call without an id, or a tool the policy marks idempotent.

        Scoped by the holder's key (its DID), not by its grant: a process that restarts hands
        its agents fresh grants (a sub-agent is delegated again when its supervisor's step is
        re-run), and the same call of the same agent must still be known to have run. The run
        scope (a LangGraph thread and task) tells one delegation's sub-agent from another's."""
        if not call_id or not call.resource.startswith("tool:"):
            return None
        tool = call.resource.removeprefix("tool:")
        spec = self.policy.document.tools.get(tool)
        if spec is not None and spec.idempotent:
            return None
        return idempotency_key(
            run_id or identity.grant_id,
            tool,
            call_id,
            decision.args_digest or argument_digest(call.args),
            tenant=self._tenant_of(self._policy_principal(identity)),
            principal=identity.did,
        )

    def _precheck(
        self, identity: AgentIdentity | None, call: Call, agent: str | None, agent_did: str | None
    ) -> Authorization | None:
        if identity is None:
            return Authorization(Verdict.DENY, call, None, (_NO_CHAIN.message,), (_NO_CHAIN,))
        if (agent is not None and identity.name != agent) or (
            agent_did is not None and identity.did != agent_did
        ):
            who = agent if agent is not None else f"of key {agent_did}"
            finding = inherited_identity(
                f"agent {who} has no grant of its own; it is running on the identity of {identity.name}"
            )
            return Authorization(Verdict.DENY, call, identity, (finding.message,), (finding,))
        borrowed = self._borrowed_identity(identity)
        if borrowed is None:
            return None
        return Authorization(Verdict.DENY, call, identity, (borrowed.message,), (borrowed,))

    def _borrowed_identity(self, identity: AgentIdentity) -> Finding | None:
        """The ``inherited_identity`` finding of ``identity`` when it carries a principal's name on
        a key the policy does not give that principal, holding its own chain; else ``None``.

        The name an identity carries is the caller's word, and the name the scheduler, approval
        requests, spans and ``Gate.delegations`` record. Refused: on another principal's key (with
        that principal's grant) since review R64, on a sub-agent's key (a delegation under the
        principal's name, which Gate.delegate refuses since review R65, restored from a
        checkpoint or built by hand) since review R65b; by ``Gate.delegate`` for the delegating
        identity since review R66. Left to the engine and the policy: a chain another key holds
        (``wrong_holder``), and an identity the policy disowns (the principal's replaced key:
        refused as "not a principal of this policy", as docs/operations.md "Rotating keys" says).

        Else, since review R66, the finding of ``identity`` presenting a grant the Gate issued or
        delegated under another name (``granted_elsewhere``: the name, or its digest, is in the
        grant's signed purpose): until then the name was a label its holder chose, and the
        scheduler's per-agent limit, the requester approvers are shown and the spans took it.

        A name is a principal's when it is, or reads as, that principal's name (NFKC, case folded,
        and since review R68 Unicode's confusables: ``_checks.principals_named``); a name that
        reads as several principals is refused on any key since review R91. A name ``Gate.issue`` and ``Gate.delegate`` would not grant
        (``_names.check_agent_name``: an invisible or control character, more than
        ``MAX_NAME_CHARS``, an edge space, letters of mixed scripts such as ``rеsearcher`` with a
        Cyrillic ``е``) is refused since review R67; until then a grant that binds no name was
        decided, and recorded, under it."""
        if identity.chain.holder != identity.did:
            return None
        # Folded as ``Gate.issue`` and ``Gate.delegate`` fold it: until review R67 a grant that
        # binds no name was decided under ``RESEARCHER`` on a key the researcher does not hold.
        # A name that reads as several principals (``bobI``: ``bobi`` and ``bobl``) is refused
        # whatever its key, as Gate.issue refuses it: until review R91 it was taken for one of
        # them by each process's hash seed.
        principals = principals_named(self.policy, identity.name)
        several = len(principals) > 1
        own = self.policy.principal_dids.get(principals[0]) if len(principals) == 1 else None
        if not several and (own is None or own == identity.did):
            granted = granted_elsewhere(identity.chain.tip.purpose, identity.name)
            if granted is not None:
                return renamed_identity(identity, granted)
        # A name Gate.issue would not grant is refused as such first, as Gate.issue refuses it
        # before comparing it with principals' names (``rеsearcher`` reads as ``researcher``).
        refused = agent_name_refused(identity.name, "the agent's")
        if refused is not None:
            return inherited_identity(
                f"{refused}; Gate.issue and Gate.delegate grant no such name, and the call would be "
                "recorded under it",
                _OWN_NAME,
                _NAME_HINT,
            )
        if several:
            return inherited_identity(several_principals(identity.name, principals), _OWN_NAME, _NAME_HINT)
        if own is None or own == identity.did:
            return None
        holder = self.index.principal_name(identity.did)
        if holder is not None:
            return inherited_identity(
                f"agent {identity.name} is running on the key and grant of {holder} "
                f"({identity.did}), not on its own key ({own} in the policy)"
            )
        if self.disowns(identity):
            return None
        return inherited_identity(
            f"agent {identity.name} is running on the key {identity.did} of a sub-agent of "
            f"{self.index.principal_name(identity.chain.root.audience)}, not on its own key "
            f"({own} in the policy), and would be recorded as {identity.name}",
            _OWN_NAME,
            _NAME_HINT,
        )

    @_serialized
    def refuse_foreign(
        self,
        identity: AgentIdentity | None,
        call: Call,
        *,
        agent: str | None = None,
        agent_did: str | None = None,
    ) -> Authorization | None:
        """The recorded refusal of ``call`` when ``identity`` is not the agent's own (none at all,
        or another agent's: ``implicit_trust_inheritance``), as ``authorize`` would refuse it;
        ``None`` when it is the agent's own. For calls that are decided elsewhere (a delegation,
        by ``delegate``) but must not run on an inherited identity. ``InputError`` (nothing written)
        for an ``identity`` or ``call`` of the wrong type, as ``authorize``."""
        self._check_decision(identity, call)
        early = self._precheck(identity, call, agent, agent_did)
        return None if early is None else self._record_refusal(early)

    @staticmethod
    def _check_decision(
        identity: object, call: object, call_id: object = None, run_id: object = None, asked_in: object = None
    ) -> None:
        """``InputError`` naming the first argument of a decision that has the wrong type."""
        expect(identity, _IDENTITY_OR_NONE, "identity", _IDENTITY + " or None")
        expect(call, Call, "call", "a Call (Call.tool, Call.model)")
        _expect_id(call_id, "call_id")
        _expect_id(run_id, "run_id")
        _expect_asked_in(asked_in)

    def _policy_principal(self, identity: AgentIdentity) -> str:
        return self._principal_of(identity.did, identity.chain)

    def _policy_verdict(self, identity: AgentIdentity, call: Call) -> PolicyDecision:
        """The policy's verdict on ``call`` by ``identity`` (``Gate.authorize``, and the gateway's
        ``authorize_invocation``). The holders above the caller in its chain drive its call: an
        approval gate leaves them out of its approvers, as it leaves out the requester (review
        R68; until then the gateway judged a sub-agent alone, and its delegator approved it)."""
        links = identity.chain.links
        delegators = [link.audience for link in links[:-1]] if len(links) > 1 else ()
        return self.index.evaluate(self._policy_principal(identity), call, delegators=delegators)

    def disowns(self, identity: AgentIdentity) -> bool:
        """Whether the policy names neither ``identity``'s key nor the principal its chain was
        first issued to (``_principal_of``): every call of the identity is then refused, e.g. on a
        run resumed after its principal was removed from the policy, or its key replaced."""
        return self.index.principal_name(self._policy_principal(identity)) is None

    @_serialized
    def budget_usage(self, identity: AgentIdentity) -> dict[str, tuple[int, int]]:
        """Per grant of the identity's chain that has a budget: (spent, limit), the outcomes
        pending flushed first. ``InputError`` for an ``identity`` that is not an
        ``AgentIdentity``. Named ``remaining`` until review R73, beside ``BudgetLedger.remaining``,
        which gives what is left, not what was spent; ``remaining`` is kept as its other name."""
        expect(identity, AgentIdentity, "identity", _IDENTITY)
        self.flush()
        return {
            link.id: (self.ledger.spent(link.id), link.budget.amount)
            for link in identity.chain.links
            if link.budget is not None
        }

    remaining = budget_usage
    """``budget_usage`` under the name it had until review R73 (docs/operations.md)."""

    @_serialized
    def verify(self) -> VerifyReport:
        """Sign a checkpoint, then recompute the audit log's tree and check every checkpoint.

        Raises ``TamperDetected``, signing nothing, where ``AuditLog.checkpoint`` refuses: a log
        that no longer extends its latest checkpoint, or, when the log grew, one whose protection
        trigger is not in force (dropped, changed or disabled since the gate opened it)."""
        self.flush()
        self.audit.checkpoint()
        return self.audit.verify()
