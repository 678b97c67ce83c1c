"""``Gate``: the composition root (the package docstring, ``agentgate.gate``, tells one call's
path through it)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import hashlib
import inspect
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, ProxyTracerProvider, Span, Tracer
from prometheus_client import CollectorRegistry

from agentgate.audit.entry import argument_digest, redact
from agentgate.audit.spans import (
    chat_span,
    decision_span,
    execute_tool_span,
    get_tracer,
    record_decision,
    record_outcome,
    record_usage,
)
from agentgate.authority import (
    ApprovalRequirement,
    Authority,
    Budget,
    Chain,
    Decision,
    GrantRepository,
    HolderRevocation,
    Invocation,
    delegate,
    findings_of,
    issue,
    parse_chain,
    record,
    revoke,
    revoke_holder,
)
from agentgate.capabilities import Call, Capability, attenuates
from agentgate.dispatch.backends import ChatChunk, ChatResult
from agentgate.dispatch.dispatcher import Dispatcher, model_slos
from agentgate.errors import (
    AgentGateError,
    ApprovalRequired,
    AuthorityError,
    BackendFailed,
    BudgetExceeded,
    CapabilityError,
    Denied,
    DispatchError,
    Expired,
    InputError,
    NoBackend,
    PolicyError,
    QuotaExceeded,
    Revoked,
    SchedulingError,
    ScopeCreep,
    StoreError,
    TokenFormatError,
)
from agentgate.findings import Finding, FindingKind
from agentgate.gate._approval import Approval, approval_call_hash, approval_call_key
from agentgate.gate._authorization import AgentIdentity, Authorization, Verdict, expect, listed, shown
from agentgate.gate._config import scheduler_config
from agentgate.gate._outcomes import (
    MAX_ERROR_DETAIL,
    NOT_STARTED,
    NOT_STARTED_DETAIL,
    USAGE_UNREAD,
    PendingOutcome,
    PendingOutcomes,
    usage_after,
)
from agentgate.gate._records import (
    PARAMETERS_IN_CLEAR,
    ran_before,
    recordable,
    redact_reasons,
    revocation_entry,
)
from agentgate.keys import PublicKey, SigningKey
from agentgate.policy import ApprovalRequirement as PolicyApproval
from agentgate.policy import (
    Outcome,
    Policy,
    PolicyDecision,
    PolicyIndex,
    QuotaRef,
    load_policy,
    role_grant_template,
)
from agentgate.store import Store, Transaction, open_store
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.audit import AuditLog, VerifyReport, log_origin, open_log_key, previous_log_keys
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import RUN_AGAIN, OnceCalls, OnceState
from agentgate.store.quotas import QuotaCounter
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    ToolCall,
    idempotency_key,
)

T = TypeVar("T")
P = ParamSpec("P")

_SUPERSEDED_FIELDS = ("principal", "chain_hash", "rule", "resource", "args_digest", "args")
"""What a superseded request's ``deny`` entry takes from its ``approval_required`` entry: the
call it named, as asked."""

_log = logging.getLogger("agentgate.gate")

# The approval gate the policy set for the call being decided in this context: the authority
# engine asks its hook after verifying the chain and before reading revocation.
_pending_approval: ContextVar[ApprovalRequirement | None] = ContextVar(
    "agentgate_pending_approval", default=None
)


def _approval_hook(call: Call, chain: Chain, invocation: Invocation | None) -> ApprovalRequirement | None:
    return _pending_approval.get()


OUTCOME_RETRY_S = 1.0
"""How long the background thread waits before it tries again outcomes whose commit failed."""

OUTCOME_RETRY_FOR_S = 300.0
"""How long an outcome the store refuses on its own (a trigger, a lock or statement timeout on
its budget row) is tried again, from its first refusal, before it is dropped (logged); its
reservation then stays held until its grant expires."""

DELEGATIONS_PURGE_S = 1.0
"""How often, at most, ``Gate.delegations`` is cleared of expired delegations (and the approval
requests asked in this process of expired ones)."""

DELEGATED_PARSED_MAX = 1024
"""How many parsed delegated chains a Gate keeps for ``delegate(call=...)`` (cleared when full)."""


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


def _serialized(method: Callable[Concatenate[Gate, P], T]) -> Callable[Concatenate[Gate, P], T]:
    """Run a ``Gate`` method holding the gate's store lock (re-entrant).

    The gate's reads and writes run one at a time, in the caller's own thread: SQLite has one
    writer anyway, and a Python lock hands over at once, where two SQLite connections racing
    for the write lock would wait in SQLite's busy handler (sleeps of milliseconds). The store
    pools its connections, so the threads a framework makes and drops (LangGraph makes a thread
    pool per run) leave none open.
    """

    def wrapper(self: Gate, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self._store_lock:
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper


async def _result_of(fn: Callable[[], Awaitable[T]]) -> T:
    """``fn()`` awaited. A plain function given where a coroutine function belongs has already run
    when it returns: its value is the call's result (awaiting it would fail after the effect, and
    the outcome would say the call failed)."""
    value = fn()
    if inspect.isawaitable(value):
        return await value
    return cast(T, value)


def _outcome_lost(auth: Authorization) -> None:
    _log.error(
        "agentgate: the outcome of audit entry %s is not recorded: the gate closed before the call settled",
        auth.audit_index,
    )


def _token_counts(tokens: object) -> tuple[int, int]:
    """``(prompt, output)`` token counts as two non-negative integers; ``InputError`` otherwise (a
    negative estimate would make a call's cost negative and skip its reservation)."""
    if isinstance(tokens, tuple | list) and len(tokens) == 2:
        prompt, output = tokens
        if all(type(n) is int and n >= 0 for n in (prompt, output)):
            return prompt, output
    raise InputError(
        f"token counts must be two non-negative integers (prompt, output), got {_bounded_repr(tokens)}"
    )


def _bounded_repr(value: object) -> str:
    """At most 80 characters of ``repr(value)``, or its type where it has none: a backend's garbage
    (an integer past Python's 4,300-digit limit, a nesting past the recursion limit) cannot turn the
    error that names it into another exception."""
    try:
        return repr(value)[:80]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} that cannot be shown"


def _output_capped(usage: tuple[int, int], limit: int | None) -> tuple[int, int]:
    """The usage a model call is charged: ``usage`` itself, or, when it reports more completion
    tokens than ``limit`` (the output reserved: the ``max_tokens`` the call was sent), the prompt
    tokens as reported with ``limit`` completion tokens. A backend that reports more output than it
    was allowed is broken or hostile; charged as reported, one call could drain a budget. (The
    prompt is charged as reported: the reservation's prompt is only an estimate.) ``limit``
    ``None`` (no output was reserved): ``usage`` unchecked. Raises ``InputError`` for usage that is
    not two token counts."""
    if limit is None:
        return usage
    prompt, output = _token_counts(usage)
    return (prompt, limit) if output > limit else usage


_NONE = type(None)
_TEXT_OR_NONE = (str, _NONE)


def _is_text_pair(value: object) -> bool:
    return type(value) is tuple and len(value) == 2 and all(isinstance(part, str) for part in value)


_IDENTITY_OR_NONE = (AgentIdentity, _NONE)
"""Module-level tuples: ``isinstance`` against them allocates nothing (``X | None`` would build a
union at each call of ``Gate.authorize``, the hot path)."""
_IDENTITY = "an AgentIdentity (Gate.issue, Gate.delegate)"
_AUTHORIZATION = "the Authorization that Gate.authorize returned"
_NO_FN = object()
"""``_check_allowed``'s ``fn`` when the caller runs no function (``abandon``)."""


def _call_tag(call: str) -> str:
    """What ``Gate.delegate`` signs into a grant's purpose for the call that delegates: a digest,
    so that thread ids and tool call ids do not show in the token."""
    return hashlib.sha256(call.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _delegation_terms(
    name: object, key: object, capabilities: object, ttl: object, budget: object
) -> list[Capability]:
    """The capabilities of a delegation to ``key`` under ``name``, once its terms are checked
    (``Gate.delegate``, and ``delegation_tool`` when it is made): ``InputError`` naming the
    parameter for a name that is not non-empty text, a key that is not a ``SigningKey``, a
    ``ttl`` that is not a positive ``timedelta``, a budget that is not a non-negative whole
    number or ``None``; ``CapabilityError`` (an ``InputError``) for a capability that does not
    parse, and naming ``capabilities`` for one string (refused, not read character by
    character) or anything else that is not a list."""
    if not isinstance(name, str) or not name:
        raise InputError(
            f"a sub-agent's name must be non-empty text, got {shown(name) if name != '' else 'empty text'}"
        )
    expect(key, SigningKey, "key", "the sub-agent's own SigningKey")
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise InputError(f"a delegation's ttl is a positive timedelta, got {shown(ttl)}")
    if budget is not None and (type(budget) is not int or budget < 0):
        raise InputError(f"a delegation's budget is a non-negative whole number or None, got {shown(budget)}")
    return [
        c if isinstance(c, Capability) else Capability.parse(c)
        for c in listed(
            capabilities,
            "capabilities",
            "capabilities (Capability or text such as 'tool:x')",
            CapabilityError,
        )
    ]


class _CarryFailed(Exception):
    """An outcome carried by a transaction could not be written: roll the transaction back."""


def _finding(kind: FindingKind, code: str, message: str, hint: str | None = None) -> Finding:
    return Finding(kind=kind, code=code, message=message, hint=hint)


_NO_CHAIN = _finding(
    FindingKind.AUTHORITY_CHAIN_OPACITY,
    "no_chain",
    "the run carries no agent identity, so no authority can be shown for this call",
    "run the agent with context=AgentIdentity(...)",
)

_METERED = frozenset({"calls", "tokens", "usd_micros", "micro_usd"})
"""The budget units ``Gate._cost`` charges (``micro_usd``: an alias of ``usd_micros``)."""
_METERED_BY_TOKENS = frozenset({"tokens", "usd_micros", "micro_usd"})
"""The units a model call is charged in from its token counts."""


class Gate:
    """Answers tool and model calls for agent identities: decide, reserve, audit, run, settle.

    Thread-safe; one per process and policy. ``Gate.open`` builds one from files with the
    embedded defaults (SQLite under ``.agentgate/``, the log key beside it). ``registry``: the
    Prometheus registry every scheduler of the gate exports its metrics to (docs/tasks.md,
    "Visibility"); a new one by default, ``Gate.registry`` either way.
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
        self._closing = False
        self._outcomes_closed = False
        self._dispatch: tuple[Dispatcher, asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._dispatch_lock = threading.Lock()
        self._dispatch_closed = False
        self._open_requests: dict[str, tuple[str, int | None, float]] = {}
        """Approval requests asked in this process and not yet answered: call hash -> (id, audit index, expiry);
        expired ones leave at a later request (within ``DELEGATIONS_PURGE_S``)."""
        self._requests_purge_at = 0.0
        self.delegations: list[tuple[str, AgentIdentity]] = []
        """(parent agent name, sub-agent identity) for the live delegations this gate made, in
        order; an expired one leaves at a later delegation (within ``DELEGATIONS_PURGE_S``)."""
        self._purge_at = 0.0
        """When ``delegations`` next needs a pass for expired entries (``time.time()``)."""
        self._parsed_delegated: dict[str, Chain] = {}
        """``parse_chain`` of the tokens ``_delegated_before`` read (bounded): a chain is a pure
        function of its token, and every delegation from a grant reads all of that grant's live
        delegations to its sub-agent again."""

    @classmethod
    def open(
        cls, policy: str | Path, store: str | Path | None = None, *, key_dir: str | Path | None = None
    ) -> Gate:
        """A gate over a policy file and a store: a URL or a SQLite file's path (``AGENTGATE_STORE``,
        else ``.agentgate/agentgate.db``).

        Raises ``PolicyError`` for a policy that cannot be loaded (or a ``policy`` that is no
        path), ``StoreError`` for a store that cannot be opened, ``InputError`` for a ``store`` that
        is neither text nor a path, or a ``key_dir`` that is no path.
        """
        expect(policy, (str, os.PathLike), "policy", "the path of a policy file", PolicyError)
        expect(store, (str, os.PathLike, _NONE), "store", "a store URL, a path or None")
        expect(key_dir, (str, os.PathLike, _NONE), "key_dir", "a directory path or None")
        loaded = load_policy(policy, key_dir=key_dir)
        opened = open_store(store)
        try:
            return cls(loaded, opened)
        except BaseException:  # a gate that cannot be made (a log key others can read...) keeps nothing open
            opened.close()
            raise

    def close(self, *, timeout_s: float = 30.0) -> None:
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
        another thread.
        """
        with self._runs_changed:
            if self._closing:
                return
            self._closing = True
        self._limits.refuse_waiting("the gate is closing: the call was not started")
        deadline = time.monotonic() + timeout_s
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        with self._runs_changed:
            # ``arun`` calls of the loop that called close() cannot progress while it waits.
            own = self._loop_runs.get(here, 0) if here is not None else 0
            self._runs_changed.wait_for(lambda: self._runs <= own, timeout_s)
            if self._runs:
                _log.error(
                    "agentgate: %d calls had not settled when close() stopped waiting (after at most "
                    "%.1fs); the outcomes of those still running when it returns will not be recorded",
                    self._runs,
                    timeout_s,
                )
        try:
            if self._sync_scheduler is not None:
                self._sync_scheduler.close(timeout_s=max(0.0, deadline - time.monotonic()))
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
            with self._store_lock:
                with self._runs_changed:
                    self._outcomes_closed = True
                self.flush()
                lost = self._outcomes.take()  # put back by a commit that failed: nothing will take them
                if lost:
                    _log.error(
                        "agentgate: %d outcomes not recorded: the store failed as the gate closed", len(lost)
                    )
                _OPEN_GATES.discard(self)
                self.grants.close()
                self.store.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- grants ---------------------------------------------------------------------------

    @_serialized
    def issue(
        self, anchor: SigningKey, *, name: str, key: SigningKey, role: str, tenant: str | None = None
    ) -> AgentIdentity:
        """A root grant from ``anchor`` (a trust anchor) to ``key`` holding exactly what ``role`` allows.

        The grant is recorded with its audit entry (an ``allow`` on ``agent:NAME`` by the anchor)
        in one transaction. Raises ``InputError`` for a ``name`` that is not non-empty text (or a
        ``tenant`` that is not text, an ``anchor`` or ``key`` that is not a ``SigningKey``, a
        ``role`` that is not text), ``PolicyError`` for an unknown role, ``Denied`` (audited, as a
        refused delegation) for an ``anchor`` that is not one of this Gate's trust anchors (a key
        rotated out of the policy): every call on such a grant would be refused ``untrusted_root``.
        """
        if not isinstance(name, str) or not name or not isinstance(tenant, str | None):
            raise InputError(
                f"an agent's name is non-empty text, and its tenant text: got {name!r}, {tenant!r}"
            )
        expect(anchor, SigningKey, "anchor", "the trust anchor's SigningKey")
        expect(key, SigningKey, "key", "the agent's own SigningKey")
        expect(role, str, "role", "a role name of the policy")
        if anchor.did not in self.authority.anchors:
            message = f"{anchor.did} is not a trust anchor of this policy: it issues nothing"
            refused = Denied(message)
            refused.finding = _finding(FindingKind.AUTHORITY_CHAIN_OPACITY, "untrusted_root", message)
            raise self._audited_refusal(refused, anchor.did, f"agent:{name}")
        template = role_grant_template(self.policy, role)
        budget = Budget(template.budget.limit, template.budget.unit) if template.budget else None
        chain = issue(
            anchor,
            key.public,
            template.capabilities,
            ttl=template.ttl_s,
            budget=budget,
            max_depth=template.max_depth,
            purpose=f"role {role}",
        )
        # A root grant is an act of authority like a delegation: the log shows who issued what to whom.
        index = self._record_grant(
            chain,
            anchor.did,
            chain.id,
            f"agent:{name}",
            f"issued grant {chain.id} to {name} ({key.did}) as role {role}: "
            + ", ".join(str(c) for c in template.capabilities)
            + f"; {template.ttl_s}s"
            + (f"; budget {budget.amount} {budget.unit}" if budget is not None else ""),
        )
        return AgentIdentity(name, key, chain, tenant or self._tenant_of(key.did), index)

    @_serialized
    def delegate(
        self,
        parent: AgentIdentity | None,
        *,
        name: str,
        key: SigningKey,
        capabilities: Iterable[Capability | str],
        ttl: timedelta,
        budget: int | None = None,
        call: str | None = None,
    ) -> AgentIdentity:
        """A sub-agent identity: a fresh grant from ``parent`` to ``key``, attenuated to
        ``capabilities`` and ``budget``, living ``ttl`` and never past the parent. Audited either way.

        ``call`` names the call that delegates (``delegation_tool``: the tool call's thread, step
        and id), signed into the grant's purpose as a digest. A live grant recorded in the store
        for the same ``call``, parent, key and terms, by this process or another, is handed on
        again instead of a fresh one, once the checks below pass as for a fresh one: a sub-agent
        resumed by another process (a restart, another worker) keeps the grant its pending
        approval is bound to. Handing it on again is not audited again; the grant's ``allow``
        entry is the one recorded when it was made.

        The policy's ``delegation`` rule of the parent's roles bounds what may be handed on
        (capabilities, TTL, budget); the authority engine checks attenuation against the
        parent's grant and its delegation depth. Raises ``ScopeCreep`` (with the finding) when
        either refuses, ``Expired``/``Denied`` from the authority engine, ``Denied`` when there
        is no parent identity at all, and ``InputError`` (nothing written) for arguments of the
        wrong type: a ``parent`` that is not an ``AgentIdentity``, a ``ttl`` that is not a positive
        ``timedelta``, and the others ``_delegation_terms`` checks.
        """
        caps = _delegation_terms(name, key, capabilities, ttl, budget)
        expect(parent, _IDENTITY_OR_NONE, "parent", _IDENTITY)
        expect(call, _TEXT_OR_NONE, "call", "text or None")
        resource = f"agent:{name}"
        purpose = f"sub-agent {name}" if call is None else f"sub-agent {name}; call {_call_tag(call)}"
        if parent is None:
            refused = Denied("no identity in the run context: there is no grant to delegate from")
            refused.finding = _NO_CHAIN
            raise self._audited_refusal(refused, "unknown", resource)
        tip = parent.chain.tip
        seconds = max(1, min(int(ttl.total_seconds()), tip.expires - int(time.time())))
        try:
            # A revoked grant (or ancestor) hands nothing on, whatever its signature still says;
            # nor does a chain whose root this policy no longer trusts (its anchor rotated out):
            # every call on it would be refused ``untrusted_root``, as Gate.issue refuses.
            self._refuse_revoked(parent)
            self._refuse_untrusted(parent)
            self._check_delegation_rule(parent, caps, seconds, budget)
            if call is not None and (again := self._delegated_before(parent, key, caps, budget, purpose)):
                return self._handed_on(parent, AgentIdentity(name, key, again, parent.tenant), again=True)
            unit = tip.budget.unit if tip.budget else "usd_micros"
            chain = delegate(
                parent.chain,
                parent.key,
                key.public,
                caps,
                ttl=seconds,
                budget=Budget(budget, unit) if budget is not None else None,
                purpose=purpose,
            )
            index = self._record_grant(
                chain,
                parent.did,
                parent.grant_id,
                resource,
                f"delegated grant {chain.id} to {name} ({key.did}): "
                + ", ".join(str(c) for c in caps)
                + f"; {seconds}s"
                # The budget the child carries: the one given, else its parent's, whole.
                + (f"; budget {held.amount} {held.unit}" if (held := chain.tip.budget) is not None else ""),
                parent=parent,
            )
        except AuthorityError as exc:
            self._audited_refusal(exc, parent.did, resource, parent.grant_id)
            raise
        return self._handed_on(parent, AgentIdentity(name, key, chain, parent.tenant, index))

    def _delegated_before(
        self, parent: AgentIdentity, key: SigningKey, caps: list[Capability], budget: int | None, purpose: str
    ) -> Chain | None:
        """The live chain recorded as delegated from ``parent`` to ``key`` with ``purpose`` and
        these terms (``delegate``'s ``call``), if any."""
        parsed = self._parsed_delegated
        for token in self.grants.delegated(parent.grant_id, key.did, now=int(time.time())):
            chain = parsed.get(token)
            if chain is None:
                chain = parse_chain(token)  # raises for a malformed one, as before: never cached
                if len(parsed) >= DELEGATED_PARSED_MAX:
                    parsed.clear()
                parsed[token] = chain
            tip = chain.tip
            if (
                tip.purpose == purpose
                and list(tip.capabilities) == caps
                and (budget is None or (tip.budget is not None and tip.budget.amount == budget))
                and chain.links[:-1] == parent.chain.links
            ):
                return chain
        return None

    def _handed_on(
        self, parent: AgentIdentity, child: AgentIdentity, *, again: bool = False
    ) -> AgentIdentity:
        """``child``, kept in ``delegations`` (the live ones) under ``parent``'s name; one handed
        on ``again`` is kept once."""
        chain = child.chain
        with self._lock:  # the live delegations only: a long-running service delegates per request
            now = time.time()
            if now >= self._purge_at:
                # One pass over the list when its soonest grant has expired, at most once every
                # DELEGATIONS_PURGE_S: a service with thousands of live delegations does not scan
                # them all at every delegation.
                self.delegations[:] = [d for d in self.delegations if d[1].chain.tip.expires > now]
                soonest = min((d[1].chain.tip.expires for d in self.delegations), default=float("inf"))
                self._purge_at = max(soonest, now + DELEGATIONS_PURGE_S)
            if not again or all(d[1].chain.id != chain.id for d in self.delegations):
                self.delegations.append((parent.name, child))
            self._purge_at = min(self._purge_at, max(chain.tip.expires, now + DELEGATIONS_PURGE_S))
        return child

    def _audited_refusal(
        self, refused: AuthorityError, principal: str, resource: str, chain_hash: str | None = None
    ) -> AuthorityError:
        """``refused`` (a grant not issued or delegated), once its ``deny`` entry is appended: its
        message and its finding as ``kind:code``, which ``audit_index`` then names."""
        reasons = [str(refused), *(f"{f.kind}:{f.code}" for f in findings_of(refused))]
        entry = {
            "kind": "deny",
            "principal": principal,
            "resource": resource,
            "policy_hash": self.policy.digest or None,  # which version refused, mid-rollout too
            "reasons": reasons,
        }
        refused.audit_index = self.audit.append(
            entry if chain_hash is None else {**entry, "chain_hash": chain_hash}
        )
        return refused

    def _refuse_untrusted(self, parent: AgentIdentity) -> None:
        """Raise ``Denied`` (``untrusted_root``) when ``parent``'s chain was issued by a key that is
        not one of this Gate's trust anchors."""
        issuer = parent.chain.root.issuer
        if issuer not in self.authority.anchors:
            message = (
                f"{parent.name}'s chain was issued by {issuer}, which is not a trust anchor of this policy"
            )
            refused = Denied(message)
            refused.finding = _finding(FindingKind.AUTHORITY_CHAIN_OPACITY, "untrusted_root", message)
            raise refused

    def _refuse_revoked(self, parent: AgentIdentity) -> None:
        """Raise ``Revoked`` when a grant of ``parent``'s chain is revoked: it hands nothing on."""
        revoked = self.grants.revoked(parent.chain.ids)
        if revoked:
            message = (
                f"grant {sorted(revoked)[0][:12]} of {parent.name}'s chain is revoked: nothing to delegate"
            )
            refused = Revoked(message)
            refused.finding = _finding(FindingKind.NON_REVOCABLE_GRANT, "revoked", message)
            raise refused

    def _record_grant(
        self,
        chain: Chain,
        principal: str,
        chain_hash: str,
        resource: str,
        reason: str,
        *,
        parent: AgentIdentity | None = None,
    ) -> int:
        """Record a grant and its ``allow`` audit entry (by ``principal``, on ``resource``
        ``agent:NAME``) in one transaction, one commit; returns the entry's index. For a grant
        delegated by ``parent``, raises ``Revoked`` (nothing written) when the parent's chain was
        revoked meanwhile: revocation is read again in that transaction, so no allow follows a
        revocation that has returned."""
        with self._decision_transaction() as tx, self.grants.within(tx):
            if parent is not None:
                self._refuse_revoked(parent)
            record(self.grants, chain)
            return self.audit.append(
                {
                    "kind": "allow",
                    "principal": principal,
                    "chain_hash": chain_hash,
                    "policy_hash": self.policy.digest or None,
                    "resource": resource,
                    "reasons": [reason],
                },
                tx,
            )

    def _check_delegation_rule(
        self, parent: AgentIdentity, caps: list[Capability], seconds: int, budget: int | None
    ) -> None:
        """Refuse (``ScopeCreep``) a delegation the policy's rules for the parent's roles do not allow."""
        name = self.index.principal_name(parent.did)
        principal = self.policy.document.principals.get(name) if name else None
        roles = [
            r for r in (principal.roles if principal else []) if self.policy.document.roles[r].delegation
        ]

        def refuse(code: str, message: str, kind: FindingKind = FindingKind.SCOPE_CREEP) -> ScopeCreep:
            error = ScopeCreep(message)
            error.finding = _finding(kind, code, message)
            return error

        if not roles:
            if principal is None and self.index.principal_name(parent.chain.root.audience) is not None:
                return  # a key made at run time: its grant's own depth and attenuation bound it
            if principal is None:  # nor is the chain's first holder: removed, or its key replaced
                raise refuse(
                    "delegation_not_in_policy",
                    f"{parent.name}'s chain was issued to {parent.chain.root.audience}, "
                    "which is not a principal of this policy",
                )
            raise refuse("delegation_not_in_policy", f"the roles of {parent.name} may not delegate at all")
        # Each capability is bounded by the rule of a role that may hand it on: one such role
        # must admit the grant's whole lifetime and budget (another role's looser limits, for
        # capabilities it hands on, do not widen this one's).
        for cap in caps:
            rules = [
                delegation
                for r in roles
                if (delegation := self.policy.document.roles[r].delegation) is not None
                and any(attenuates(rule.capability, cap) for rule in self.policy.delegable.get(r, ()))
            ]
            if not rules:
                raise refuse(
                    "delegation_wider_than_policy", f"the policy does not let {parent.name} hand on {cap}"
                )
            lasting = [d for d in rules if d.max_ttl_s is None or seconds <= d.max_ttl_s]
            if not lasting:
                longest = max(d.max_ttl_s or 0 for d in rules)
                # Too long-lived, as a child outliving its parent and the linter's
                # ttl_above_policy_max: authority that cannot be taken back in time.
                raise refuse(
                    "delegation_ttl_above_policy",
                    f"a delegated grant with {cap} may live {longest}s at most, not {seconds}s",
                    FindingKind.NON_REVOCABLE_GRANT,
                )
            if not any(
                d.budget is None or (budget is not None and budget <= d.budget.limit) for d in lasting
            ):
                largest = max(d.budget.limit for d in lasting if d.budget)
                asked = "the parent's whole budget" if budget is None else str(budget)
                raise refuse(
                    "delegation_budget_above_policy",
                    f"a delegated grant with {cap} may carry a budget of {largest} at most, not {asked}",
                )

    @_serialized
    def revoke(self, grant: AgentIdentity | Chain | str, *, by: str = "operator", reason: str = "") -> str:
        """Revoke a grant and, through it, every grant below it; audited. Returns the grant id.

        Raises ``TokenFormatError`` for a ``grant`` that is none, ``InputError`` for a ``by`` or
        ``reason`` that is not text; nothing is written then."""
        expect(by, str, "by", "text (who revokes)")
        expect(reason, str, "reason", "text")
        target = grant.chain if isinstance(grant, AgentIdentity) else grant
        # The revocation and its audit entry: one transaction, so neither exists without the other.
        with self._decision_transaction() as tx, self.grants.within(tx):
            grant_id = revoke(self.grants, target, reason=reason)
            self.audit.append(revocation_entry(grant_id, by, reason), tx)
        return grant_id

    def revoke_holder(
        self, holder: PublicKey | str, *, by: str = "operator", reason: str = ""
    ) -> HolderRevocation:
        """Revoke every grant this gate's store records for the key ``holder`` (a leaked agent
        key: ``authority.revoke_holder``), each with its ``revoke`` entry, in one transaction.
        Grants to the key never recorded in this store are not reached: remove the key from the
        policy and restart for those (docs/operations.md, Rotating keys). Raises ``KeyFileError``
        for a ``holder`` that is no did:key, ``InputError`` for a ``by`` or ``reason`` that is
        not text; nothing is written then."""
        expect(by, str, "by", "text (who revokes)")
        expect(reason, str, "reason", "text")
        with self._decision_transaction() as tx, self.grants.within(tx):
            done = revoke_holder(self.grants, holder, reason=reason)
            for grant_id in done.revoked:
                self.audit.append(revocation_entry(grant_id, by, reason), tx)
        return done

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

    # --- deciding -------------------------------------------------------------------------

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
    ) -> Authorization:
        """Decide ``call`` for ``identity`` and record the decision before anything runs.

        ``agent``/``agent_did``: the agent the caller runs as; an identity that belongs to another
        agent is refused (``implicit_trust_inheritance``). ``tokens``: (prompt, max output) for a
        model call, to reserve its cost. ``call_id``: the framework's id for the call, which binds
        an approval request to this very call. ``run_id``: the run (a LangGraph thread and task)
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
        ``run_id`` that is not text) and for ``tokens`` that are not two token counts. An
        ``approval`` that is not an ``Approval`` (``Approval.parse`` reads a resume value) is a
        recorded refusal. ``approval_gates=False``: the call continues one that its approval was
        given for (a GPU lease's renewal, ``GatedBroker.renew``), so the policy's approval gates
        are not asked again; everything else is decided as always.
        """
        # The hot path: four isinstance checks against module-level tuples, nothing allocated;
        # ``_check_decision`` names the argument only when one is wrong.
        if not (
            isinstance(call, Call)
            and isinstance(identity, _IDENTITY_OR_NONE)
            and isinstance(call_id, _TEXT_OR_NONE)
            and isinstance(run_id, _TEXT_OR_NONE)
            and (asked_in is None or _is_text_pair(asked_in))
        ):
            self._check_decision(identity, call, call_id, run_id, asked_in)
        early = self._precheck(identity, call, agent, agent_did)
        if early is not None:
            return self._record_refusal(early, call_id)
        assert identity is not None
        if approval is not None and not isinstance(approval, Approval):
            return self._refuse_unreadable_approval(identity, call, approval, call_id)
        verdict = self.index.evaluate(self._policy_principal(identity), call)
        if verdict.outcome is Outcome.DENY:
            return self._record_refusal(Authorization(Verdict.DENY, call, identity, verdict.reasons), call_id)
        try:
            request = self._approval_request(identity, call, verdict, call_id) if approval_gates else None
        except InputError as exc:  # arguments with no digest (text that is not valid Unicode)
            refused = Authorization(
                Verdict.DENY, call, identity, (f"the call's arguments cannot be recorded: {exc}",)
            )
            return self._record_refusal(refused, call_id)
        rule = self._quorum_rule(verdict.approval)
        approved, unused, pending = (
            self._approval_state(approval, request, rule, verdict.approval, identity)
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
            if auth.needs_approval:
                call_key = self._scoped_call_key(identity, call_id, asked_in)
                auth = self._record_approval_request(auth, request, rule, tx, call_key)
            elif auth.allowed:
                auth = self._record_allow(auth, approved, request, tokens, tx, verdict.quotas, once, rule)
            else:
                auth = self._write_refusal(auth, tx, ref=self._close_asked(auth, call_id, tx))
        if not auth.allowed:
            self._refusal_span(auth, call_id)
        return auth

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

    def _approval_state(
        self,
        approval: Approval | None,
        request: Mapping[str, Any],
        rule: QuorumRule | None,
        gate: PolicyApproval | None,
        identity: AgentIdentity,
    ) -> tuple[Approval | None, tuple[str, ...], ApprovalRequirement | None]:
        """For a call with an approval ``request``: the approval that completes it (``None`` when
        none does), the reasons an approval given was not used, and the approval the call still
        needs (``None`` once approved, or when no policy gate asks for one)."""
        approved, unused = self._approval_complete(approval, request, rule)
        if approved is not None and self._superseded(approved, request, identity):
            unused = (
                f"approval of request {approved.request} not used: it expired, and the call was asked for again",
            )
            approved = None  # asked for again, under the request that replaced its own
        pending = None
        if approved is None and gate is not None:
            pending = ApprovalRequirement(gate.approvers, gate.quorum, f"approval gate {gate.gate}")
        return approved, unused, pending

    @staticmethod
    def _refuse_ran_before(auth: Authorization, once: str, last: tuple[OnceState, int]) -> Authorization:
        """``auth`` turned into the refusal of a call that must run once and has run (or started)."""
        # A call that ran to completion keeps its key: an integration may hold its answer.
        ran = once if last[0] == "ok" else None
        return replace(auth, verdict=Verdict.DENY, reasons=(ran_before(auth.call, *last),), once_key=ran)

    @staticmethod
    def _scoped_call_key(
        identity: AgentIdentity, call_id: str | None, asked_in: tuple[str, str] | None
    ) -> tuple[str, str] | None:
        """The key that names a framework call's approval request, with the version it was asked
        in; ``None`` without a call id and a scope."""
        # Named only within its scope: ids a scripted model reuses in other threads stay apart.
        if call_id and asked_in:
            return approval_call_key(identity.did, asked_in[0], call_id), asked_in[1]
        return None

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
            return Authorization(
                Verdict.DENY,
                call,
                identity,
                (f"agent {agent} has no grant of its own; it is running on the identity of {identity.name}",),
                (
                    _finding(
                        FindingKind.IMPLICIT_TRUST_INHERITANCE,
                        "inherited_identity",
                        f"nested agent {agent} inherited the run context of {identity.name}",
                        "expose the sub-agent through delegation_tool so that it gets its own attenuated grant",
                    ),
                ),
            )
        return None

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
        expect(call_id, _TEXT_OR_NONE, "call_id", "text or None")
        expect(run_id, _TEXT_OR_NONE, "run_id", "text or None")
        if not (asked_in is None or _is_text_pair(asked_in)):
            raise InputError(
                f"asked_in must be a (scope, version) pair of text or None, got {shown(asked_in)}"
            )

    def _policy_principal(self, identity: AgentIdentity) -> str:
        return self._principal_of(identity.did, identity.chain)

    # --- approvals ------------------------------------------------------------------------

    def _approval_request(
        self, identity: AgentIdentity, call: Call, verdict: PolicyDecision, call_id: str | None
    ) -> dict[str, Any] | None:
        gate = verdict.approval
        if verdict.outcome is not Outcome.APPROVAL_REQUIRED or gate is None:
            return None
        digest = argument_digest(call.args)
        return {
            "id": "",
            "call_hash": approval_call_hash(
                call.resource, call.action, digest, identity.grant_id, call_id or ""
            ),
            "gate": gate.gate,
            "resource": call.resource,
            "action": call.action,
            "grant": identity.grant_id,
            "call_id": call_id or "",
            "args": redact(call.args, self._loggable(call)),
            "args_digest": digest,
            "requester": identity.name,
            "requester_did": identity.did,
            "approvers": list(gate.approvers),
            "quorum": gate.quorum,
            "expires_at": int(time.time()) + gate.expiry_s,
            "reasons": list(verdict.reasons),
        }

    @staticmethod
    def _quorum_rule(gate: PolicyApproval | None) -> QuorumRule | None:
        """The quorum of the policy's approval gate now and the DIDs of the approvers it names."""
        if gate is None:
            return None
        return QuorumRule(gate.quorum, frozenset(did for did in gate.approver_dids if did))

    @staticmethod
    def _approval_invalid(approval: Approval, request: Mapping[str, Any], rule: QuorumRule) -> str | None:
        """Why ``approval`` cannot count for ``request`` under ``rule``, or ``None`` when it can."""
        if approval.call_hash != request["call_hash"]:
            return "approval not counted: it was given for another call"
        if approval.approver not in rule.voters:
            return "approval not counted: its approver is not one of this call's approvers"
        if approval.approver == request["requester_did"]:
            return "approval not counted: the approver must not be the requester"
        if not approval.verify():
            return f"approval not counted: its signature is not {approval.approver}'s"
        return None

    def _superseded(self, approval: Approval, request: Mapping[str, Any], identity: AgentIdentity) -> bool:
        """Whether the call was asked for again under a newer request than ``approval``'s, one
        still open, because its own expired unused. A LangGraph run resumed with that approval first
        decides without it (the node runs again), which opens the new request; refusing the old
        approval then would leave the new request pending, shown to approvers and never answered
        in the log. It is asked for instead, as an approval that does not hold is."""
        found = self.approvals.open_for(request["call_hash"], identity.did)
        if found is None or found[0] == approval.request:
            return False
        try:
            own = self.approvals.get(approval.request)
        except InputError:  # no such request: refused as one that names none
            return False
        # Expired, not used: an approval already used is refused, even with a newer request open.
        return own.state != "consumed" and own.expires_at <= time.time()

    def _approval_complete(
        self, approval: Approval | None, request: Mapping[str, Any], rule: QuorumRule | None
    ) -> tuple[Approval | None, tuple[str, ...]]:
        """The approval that completes the gate's quorum, or ``None`` while it is not complete,
        and why the approval given did not count (a reason for the ``approval_required`` answer
        and its entry: an approver told nothing would sign again and again).

        A quorum of one is decided with the call, in the decision's transaction. Above one, each
        valid approval is recorded at once as one approver's vote (``store.approvals``; an
        approver counts once), and the call is approved when the votes reach the quorum; until
        then it stays ``approval_required`` and the run asks the next approver. The quorum and
        the approvers who count are the policy's now (``rule``), also for a request asked under
        an earlier version of it.
        """
        if approval is None or rule is None:
            return None, ()
        invalid = self._approval_invalid(approval, request, rule)
        if invalid is not None:
            return None, (invalid,)
        if rule.quorum == 1:
            return approval, ()
        unused: tuple[str, ...] = ()
        with self._decision_transaction() as tx:
            try:
                self.approvals.approve(
                    approval.request, approval.approver, call_hash=request["call_hash"], tx=tx, rule=rule
                )
            except (Denied, Expired, Revoked, InputError) as exc:
                # A repeated, late, void or misdirected vote adds nothing; the count below decides.
                unused = (f"approval by {approval.approver} not counted: {exc!s:.300}",)
            else:
                self._write_approval_given(approval, request, self._asked_index(approval, request, tx), tx)
            votes = self.approvals.approvers(approval.request, tx=tx, rule=rule)
        return (approval, ()) if len(votes) >= rule.quorum else (None, unused)

    def _asked_index(self, approval: Approval, request: Mapping[str, Any], tx: Transaction) -> int | None:
        """The index of the ``approval_required`` entry of the request ``approval`` answers: known
        here when this process asked that very request, else read from the store (another
        process sharing it asked, or this one before a restart)."""
        with self._lock:
            asked = self._open_requests.get(request["call_hash"])
        if asked is not None and asked[0] == approval.request:
            return asked[1]
        return self.approvals.asked_index(approval.request, request["call_hash"], tx=tx)

    def _write_approval_given(
        self, approval: Approval, request: Mapping[str, Any], asked_index: int | None, tx: Transaction
    ) -> None:
        """Record one approver's counted yes (``approval_given``) in ``tx``, referring to the
        request's ``approval_required`` entry when it is known (``asked_index``). The approval's
        request id, call hash and signature are in ``reasons``, so the log alone shows that the
        approver signed this very call (docs/audit-format.md)."""
        self.audit.append(
            {
                "kind": "approval_given",
                "principal": approval.approver,
                "chain_hash": request["grant"],
                "policy_hash": self.policy.digest or None,
                "resource": recordable(request["resource"]),
                "args_digest": request["args_digest"],
                "args": request["args"],
                "approver": approval.approver,
                "ref": asked_index,
                "reasons": [
                    f"request:{recordable(approval.request)}",
                    f"call_hash:{recordable(approval.call_hash)}",
                    f"signature:{approval.signature.hex()}",
                ],
            },
            tx,
        )

    def approve(self, payload: Mapping[str, Any], approver: SigningKey) -> dict[str, str]:
        """Convenience for a human's tool: sign the request in ``payload``; the resume value.

        ``InputError`` for a ``payload`` that carries no request, an ``approver`` that is not a
        ``SigningKey`` (``Approval.sign``)."""
        return Approval.sign(payload, approver).to_dict()

    @_serialized
    def decline(self, auth: Authorization, reason: str = "no approval was given") -> Authorization:
        """Record that the approval ``auth`` asked for was not given; the refusal.

        For an authorization that needs approval and whose request was recorded (``authorize``
        returned it). In one transaction: the request is closed as denied (if it is still
        pending; an expired one is recorded as declined too) and a ``deny`` entry refers to the
        ``approval_required`` entry (``ref``), with ``reason``. The same call asked again later
        makes a new request. Raises ``InputError`` for any other authorization, and for a
        request that was decided meanwhile (approved, used, denied): the log already says how it
        ended, and a refusal of it would contradict that; nothing is written then. Also for an
        ``auth`` that is not an ``Authorization`` or a ``reason`` that is not text.
        """
        expect(auth, Authorization, "auth", _AUTHORIZATION)
        expect(reason, str, "reason", "text")
        request = auth.request
        if not auth.needs_approval or request is None or "id" not in request or auth.audit_index is None:
            raise InputError("only an authorization waiting for a recorded approval request can be declined")
        refused = replace(
            auth, verdict=Verdict.DENY, reasons=(*auth.reasons, f"approval declined: {reason}"[:500])
        )
        with self._decision_transaction() as tx:
            try:
                self.approvals.deny(request["id"], "agentgate:declined", tx=tx)
            except (Expired, Revoked):
                pass  # nobody answered in time, or its grant was revoked (the request is void): declined
            except (AuthorityError, InputError) as exc:
                raise InputError(f"approval request {request['id']} cannot be declined: {exc}") from None
            index = self.audit.append({**self._entry(refused, "deny"), "ref": auth.audit_index}, tx)
        with self._lock:
            self._open_requests.pop(request["call_hash"], None)
        refused = replace(refused, audit_index=index)
        self._refusal_span(refused)
        return refused

    # --- recording ------------------------------------------------------------------------

    def _entry(self, auth: Authorization, kind: str) -> dict[str, Any]:
        identity = auth.identity
        loggable = self._loggable(auth.call)
        reasons = [
            *(
                redact_reasons(auth.reasons, auth.call.args, loggable, self._declared(auth.call))
                if auth.reasons
                else ()
            ),
            *(f"{f.kind}:{f.code}" for f in auth.findings),
        ]
        decided = auth.decision.args_digest if auth.decision is not None else None
        try:
            # The authority engine digested these very arguments by the audit log's encoder
            # (``args_digest``): its digest is reused, about 9 us of a decision.
            digest: str | None = f"sha256:{decided}" if decided else argument_digest(auth.call.args)
            shown = redact(auth.call.args, loggable)
        except InputError:  # arguments without a canonical form (a lone surrogate...): refused
            digest, shown = None, {}
            reasons.append("the arguments have no canonical JSON form; they are not recorded")
        return {
            "kind": kind,
            "principal": identity.did if identity else "unknown",
            "chain_hash": identity.grant_id if identity else None,
            "policy_hash": self.policy.digest or None,
            "rule": auth.rule,
            "resource": recordable(auth.call.resource),
            "args_digest": digest,
            "args": shown,
            "approver": auth.approver,
            "reasons": [recordable(reason) for reason in reasons],
        }

    def _loggable(self, call: Call) -> list[str]:
        """The arguments of ``call`` kept in clear: a tool's ``loggable`` ones, a model call's or
        GPU lease's settings (``PARAMETERS_IN_CLEAR``)."""
        kind, _, name = call.resource.partition(":")
        if kind != "tool":
            return list(PARAMETERS_IN_CLEAR.get(kind, ()))
        tool = self.policy.document.tools.get(name)
        return list(tool.loggable) if tool else []

    def _declared(self, call: Call) -> Container[str] | None:
        """The argument names a tool call's tool declares (``None`` for other calls, and for a
        tool the policy does not declare: its refusal quotes no argument name)."""
        kind, _, name = call.resource.partition(":")
        tool = self.policy.document.tools.get(name) if kind == "tool" else None
        return tool.args.keys() if tool is not None else None

    @contextmanager
    def _decision_transaction(self) -> Iterator[Transaction]:
        """A store transaction for a decision that also commits the outcomes pending until now."""
        carried = self._outcomes.take()
        try:
            with self._carrying(carried) as tx:
                yield tx
        except BaseException:
            self._outcomes.restore(carried)
            raise

    @contextmanager
    def _carrying(self, batch: list[PendingOutcome]) -> Iterator[Transaction]:
        """A store transaction that writes the outcomes of ``batch`` first (the audit lock taken
        before any row: one lock order for every writer, PostgreSQL), then holds what the caller
        writes. When an outcome cannot be written, that transaction (nothing else in it yet) is
        rolled back whole and a second one writes each outcome that can be, under savepoints."""
        try:
            with self.store.transaction() as tx:
                self.audit.lock(tx)
                self._carry_all(tx, batch)
                yield tx
                return
        except _CarryFailed:
            pass
        with self.store.transaction() as tx:
            self.audit.lock(tx)
            refused = self._carry(tx, batch)
            yield tx
        self._outcomes.restore(refused, retry_after_s=OUTCOME_RETRY_S)  # committed: try them again

    @_serialized
    def record_refusal(
        self,
        identity: AgentIdentity | None,
        call: Call,
        reasons: Sequence[str],
        *,
        findings: Sequence[Finding] = (),
        call_id: str | None = None,
    ) -> Authorization:
        """Record, as a ``deny`` entry (and an error span), a call its caller refuses before the
        Gate could decide it (an integration's own check: a tool call without an id, a tool name
        that is no resource name; the gateway's malformed requests); the refusal. ``identity`` is
        the caller's (``None``: unknown). Raises ``InputError`` when the entry cannot be encoded,
        ``AuditError``/``StoreError`` when it cannot be written."""
        expect(call, Call, "call", "a Call")
        refused = Authorization(Verdict.DENY, call, identity, tuple(reasons), tuple(findings))
        return self._record_refusal(refused, call_id)

    def disowns(self, identity: AgentIdentity) -> bool:
        """Whether the policy names neither ``identity``'s key nor the principal its chain was
        first issued to (``_principal_of``): every call of the identity is then refused, e.g. on a
        run resumed after its principal was removed from the policy, or its key replaced."""
        return self.index.principal_name(self._policy_principal(identity)) is None

    def _record_refusal(
        self, auth: Authorization, call_id: str | None = None, *, close_asked: bool = True
    ) -> Authorization:
        """Record a refusal in a decision transaction of its own; the refused authorization. With
        ``close_asked``, an approval request open for the call is closed (``_close_asked``)."""
        with self._decision_transaction() as tx:
            ref = self._close_asked(auth, call_id, tx) if close_asked else None
            refused = self._write_refusal(auth, tx, ref=ref)
        self._refusal_span(refused, call_id)
        return refused

    def _close_asked(self, refused: Authorization, call_id: str | None, tx: Transaction) -> int | None:
        """Close (deny) the approval request still open for the tool call that ``refused``
        refuses, if one was asked: a run paused for an approval and resumed after the policy
        changed is refused outright, and the request would stay pending, listed and never answered
        in the log. Returns the index of its ``approval_required`` entry, which the refusal then
        refers to (as a declined request's does); ``None`` when no request is open."""
        identity = refused.identity
        if not call_id or identity is None or not refused.call.resource.startswith("tool:"):
            return None
        try:
            digest = argument_digest(refused.call.args)
        except InputError:
            return None
        call = refused.call
        call_hash = approval_call_hash(call.resource, call.action, digest, identity.grant_id, call_id)
        known = self.approvals.open_for(call_hash, identity.did, tx=tx)
        if known is None:
            return None
        with contextlib.suppress(Denied, Expired, Revoked, InputError):  # decided meanwhile
            self.approvals.deny(known[0], "agentgate:refused", tx=tx)
        with self._lock:
            self._open_requests.pop(call_hash, None)
        return known[1]

    def _write_refusal(self, auth: Authorization, tx: Transaction, ref: int | None = None) -> Authorization:
        entry = self._entry(auth, "deny")
        if ref is not None:
            entry["ref"] = ref
        index = self.audit.append(entry, tx)
        return replace(auth, verdict=Verdict.DENY, audit_index=index)

    def _refusal_span(self, refused: Authorization, call_id: str | None = None) -> None:
        with self._span(refused, call_id):  # a refused call shows in the trace too, as an ERROR span
            pass

    def _record_approval_request(
        self,
        auth: Authorization,
        request: Mapping[str, Any] | None,
        rule: QuorumRule | None,
        tx: Transaction | None = None,
        call_key: tuple[str, str] | None = None,
    ) -> Authorization:
        """Record that ``auth`` waits for an approval: the request open for its call, or a new
        one with its ``approval_required`` entry. A new request for a framework call
        (``call_key``, see ``_call_key``) closes the requests open for the same call under other
        arguments or another tool (``_supersede``)."""
        assert request is not None and auth.identity is not None
        call_hash = request["call_hash"]
        # The store says which request is open, never this process's memory: another process
        # sharing it may have declined or used the request asked here (handing it out again
        # would ask approvers for an approval that can never be used), or asked first; and this
        # one may have asked before a restart (a run resumed from its checkpoint asks again
        # before its approval is read). The same open request is the same request.
        with self._decision_transaction() if tx is None else nullcontext(tx) as t:
            known = self.approvals.open_for(call_hash, auth.identity.did, tx=t)
            if known is not None and call_key is not None:  # asked by an earlier version: keyed now
                self.approvals.keep_call(known[0], call_key, tx=t)
        with self._lock:
            if known is None:
                self._open_requests.pop(call_hash, None)
            else:
                self._open_requests[call_hash] = known
        if known is not None:
            # The same call asked again (LangGraph re-runs a node when it resumes): one request,
            # one audit entry, until it is answered or expires.
            votes = (
                list(self.approvals.approvers(known[0], tx=tx, rule=rule)) if request["quorum"] > 1 else []
            )
            return replace(
                auth,
                audit_index=known[1],
                request={**request, "id": known[0], "expires_at": known[2], "approved_by": votes},
            )
        with self._decision_transaction() if tx is None else nullcontext(tx) as t:
            request_id = self.approvals.request(
                call_hash,
                auth.identity.did,
                request["expires_at"],
                quorum=request["quorum"],
                grants=auth.identity.chain.ids,
                voters=None if rule is None else rule.voters,
                call_key=call_key,
                tx=t,
            )
            index = self.audit.append(self._entry(auth, "approval_required"), t)
            self.approvals.asked(request_id, index, tx=t)
            if call_key is not None:
                self._supersede(call_key, request, request_id, t)
        with self._lock:
            now = time.time()
            if now >= self._requests_purge_at:
                # Requests nobody answered (their runs abandoned) leave once expired, in one pass
                # at most every DELEGATIONS_PURGE_S: a service's memory does not grow per request.
                self._open_requests = {h: r for h, r in self._open_requests.items() if r[2] > now}
                self._requests_purge_at = now + DELEGATIONS_PURGE_S
            self._open_requests[call_hash] = (request_id, index, float(request["expires_at"]))
        return replace(auth, audit_index=index, request={**request, "id": request_id, "approved_by": []})

    def _supersede(
        self, call_key: tuple[str, str], request: Mapping[str, Any], request_id: str, tx: Transaction
    ) -> None:
        """Close the requests still open for the framework call ``call_key`` that were asked in
        another version of the answer that asked for it: the answer was edited in the run's state
        (LangGraph ``update_state``) before the call was asked for again, so no run will make the
        call they name, and they would stay listed to approvers until they expire (review R40).
        Each is closed as denied, and a ``deny`` entry of the call it named refers to its
        ``approval_required`` entry, as a declined request's does."""
        for old_id, old_hash, asked_index in self.approvals.supersede(call_key, tx=tx):
            with self._lock:
                self._open_requests.pop(old_hash, None)
            if asked_index is None:
                continue
            asked = self.audit.entry(asked_index, tx)
            reason = (
                f"approval request {old_id} superseded by request {request_id}: tool call "
                f"{request['call_id']!r} was changed and asked for again"
            )
            self.audit.append(
                {
                    **{name: getattr(asked, name) for name in _SUPERSEDED_FIELDS},
                    "kind": "deny",
                    "policy_hash": self.policy.digest or None,
                    "reasons": [recordable(reason)],
                    "ref": asked_index,
                },
                tx,
            )

    def _record_allow(
        self,
        auth: Authorization,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tokens: tuple[int, int] | None,
        tx: Transaction | None = None,
        quotas: Sequence[QuotaRef] = (),
        once_key: str | None = None,
        rule: QuorumRule | None = None,
    ) -> Authorization:
        """Record an allow (approval consumed, budget reserved, policy quotas counted, audit
        entry, a call that must run once marked started) in ``tx``, or in a decision transaction
        of its own; a budget, a quota or an approval that does not hold turns it into a recorded
        refusal in the same transaction (the partial writes rolled back to a savepoint)."""
        if tx is None:
            return self._record_allow_alone(auth, approval, request, tokens, quotas, once_key, rule)
        identity, decision = auth.identity, auth.decision
        assert identity is not None and decision is not None
        amounts = self._cost(auth.call, tokens)
        by_unit = self._caps(decision)
        if not by_unit.keys() <= _METERED or (
            tokens is None and auth.call.resource.startswith("model:") and by_unit.keys() & _METERED_BY_TOKENS
        ):
            return self._write_refusal(replace(auth, reasons=(self._unmetered(by_unit),)), tx)
        reserve = [
            (unit, caps, amounts.get(unit, 0)) for unit, caps in by_unit.items() if amounts.get(unit, 0) > 0
        ]
        # Only what can refuse after writing needs the savepoint: an approval to consume, a quota
        # to count, a reservation against more than one budget. One budget's reservation writes
        # nothing when it refuses (``BudgetLedger.reserve``): a caller's own budget, the usual
        # case, costs no SAVEPOINT/RELEASE pair (about 6 us on SQLite, two round trips on PostgreSQL).
        guarded = (
            bool(quotas) or approval is not None or len(reserve) > 1 or any(len(c) > 1 for _, c, _ in reserve)
        )
        full: QuotaRef | None = None  # the quota whose window could not hold the call
        if guarded:
            tx.execute("SAVEPOINT agentgate_allow")
        try:
            if approval is not None and request is not None:
                auth = self._consume_approval(auth, approval, request, rule, tx)
            held = tuple(
                (self.ledger.reserve(tx, identity.chain.ids, caps, amount), unit, amount)
                for unit, caps, amount in reserve
            )
            full = self.quotas.count(tx, quotas, amounts, time.time()) if quotas else None
            if full is not None:
                raise _quota_exceeded(full, amounts)
        except (BudgetExceeded, QuotaExceeded, Denied, Expired, Revoked, InputError) as exc:
            if guarded:
                tx.execute("ROLLBACK TO SAVEPOINT agentgate_allow")
                tx.execute("RELEASE SAVEPOINT agentgate_allow")
            return self._refuse_unheld_allow(auth, exc, full, amounts, approval, request, tx)
        if guarded:
            tx.execute("RELEASE SAVEPOINT agentgate_allow")
        entry = self._entry(auth, "allow")
        if held:
            entry["budget_delta"] = held[0][2]  # reserved, in the unit of the caller's own budget
        index = self.audit.append(entry, tx)
        if once_key is not None:
            self.once.start(tx, once_key, index, [reservation for reservation, _, _ in held])
        # The output a model call's outcome is charged at most (``_cost`` has checked ``tokens``).
        output = tokens[1] if tokens is not None and auth.call.resource.startswith("model:") else None
        allowed = Authorization(  # built directly: dataclasses.replace costs more than the rest of this step
            auth.verdict,
            auth.call,
            identity,
            auth.reasons,
            auth.findings,
            index,
            held,
            auth.request,
            auth.approver,
            decision,
            rule=auth.rule,
            once_key=once_key,
            output_tokens=output,
        )
        allowed._use.sealed = self._seal(allowed)
        return allowed

    def _record_allow_alone(
        self,
        auth: Authorization,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tokens: tuple[int, int] | None,
        quotas: Sequence[QuotaRef],
        once_key: str | None,
        rule: QuorumRule | None,
    ) -> Authorization:
        """``_record_allow`` in a decision transaction of its own, with the span of a refusal."""
        with self._decision_transaction() as own:
            recorded = self._record_allow(auth, approval, request, tokens, own, quotas, once_key, rule)
        if not recorded.allowed:
            self._refusal_span(recorded)
        return recorded

    def _consume_approval(
        self,
        auth: Authorization,
        approval: Approval,
        request: Mapping[str, Any],
        rule: QuorumRule | None,
        tx: Transaction,
    ) -> Authorization:
        """Use ``approval`` up for the call ``auth`` allows, in ``tx``: its vote counted (a quorum
        of one), the request closed and, for a vote counted now, its ``approval_given`` entry.
        Returns ``auth`` naming the approvers and the request. Raises what ``approve`` and
        ``consume`` raise (``Denied``, ``Expired``, ...) for an approval that does not hold."""
        voted = request["quorum"] == 1  # a larger quorum's votes were recorded as they came
        if voted:
            try:
                self.approvals.approve(approval.request, approval.approver, tx=tx, rule=rule)
            except Denied:
                # This approver's vote is in already (given under a larger quorum, which
                # the policy has since lowered): ``consume`` decides whether it holds.
                voted = False
        approvers = self.approvals.consume(approval.request, request["call_hash"], tx=tx, rule=rule)
        asked_index = self._asked_index(approval, request, tx)
        with self._lock:
            self._open_requests.pop(request["call_hash"], None)
        if voted:
            self._write_approval_given(approval, request, asked_index, tx)
        # The request, as a call that pauses before completing re-arms it (``_write_outcome``).
        return replace(
            auth,
            approver=",".join(approvers),
            request={**request, "id": approval.request, "asked_index": asked_index},
        )

    def _refuse_unheld_allow(
        self,
        auth: Authorization,
        exc: Exception,
        full: QuotaRef | None,
        amounts: Mapping[str, int],
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tx: Transaction,
    ) -> Authorization:
        """Record the refusal of an allow whose budget, quota (``full``) or approval did not hold
        (``exc``), after its partial writes were rolled back."""
        identity = auth.identity
        assert identity is not None
        if isinstance(exc, QuotaExceeded) and full is not None:
            never = amounts.get(full.unit, 0) > full.limit
            refused = replace(auth, reasons=(str(exc),), quota_exceeded=full.name, quota_never_fits=never)
            return self._write_refusal(refused, tx)
        if isinstance(exc, BudgetExceeded):
            refused = replace(auth, reasons=(self._budget_reason(identity, exc, tx),), budget_exhausted=True)
        else:
            # Refers to the request it ends, as a declined one does (if it was for this call).
            refused = replace(auth, reasons=(f"approval not usable: {exc}",))
            if approval is not None and request is not None:
                asked_at = self.approvals.asked_index(approval.request, request["call_hash"], tx=tx)
                return self._write_refusal(refused, tx, ref=asked_at)
        return self._write_refusal(refused, tx)

    def _seal(self, auth: Authorization) -> tuple[object, ...]:
        """What ``_check_allowed`` compares: this Gate and the fields its run and outcome use. The
        Gate is held weakly (a ``weakref.ref`` equals another while its Gate lives): an allow the
        caller keeps does not keep a closed Gate alive with its chain cache, policy index,
        schedulers and the keys of its delegations."""
        return (
            weakref.ref(self),
            auth.verdict,
            auth.call,
            auth.identity,
            auth.audit_index,
            auth.reservations,
            auth.once_key,
            auth.output_tokens,
            auth.request,
        )

    @staticmethod
    def _unmetered(by_unit: Mapping[str, object]) -> str:
        """Why a call on budgets that cannot be metered is refused (fail closed: a budget never
        charged would let its grant spend without limit)."""
        unknown = sorted(by_unit.keys() - _METERED)
        if unknown:
            return (
                f"the chain's budget in {unknown[0]!r} cannot be metered (agentgate charges "
                f"{', '.join(sorted(_METERED - {'micro_usd'}))}): no call may spend from it"
            )
        return "a model call on a tokens or usd_micros budget needs its token estimate (tokens=)"

    def _budget_reason(self, identity: AgentIdentity, exc: BudgetExceeded, tx: Transaction) -> str:
        # Read in the decision's transaction: it holds the write lock and the outcomes it carries.
        parts = []
        for link in identity.chain.links:
            if link.budget is not None:
                spent, held = self.ledger.usage(link.id, tx=tx)
                in_flight = f" and {held} held by calls in flight" if held else ""
                parts.append(
                    f"{spent} of {link.budget.amount} {link.budget.unit} spent{in_flight} on grant {link.id[:12]}"
                )
        return f"budget exhausted ({'; '.join(parts) or exc})"

    @staticmethod
    def _caps(decision: Decision) -> dict[str, dict[str, int]]:
        """Budget caps by unit and grant; the unit of the budget nearest the tip (the caller's own)
        first: audit entries report their ``budget_delta`` in that unit."""
        by_unit: dict[str, dict[str, int]] = {}
        for grant_id, budget in reversed(decision.budgets):
            by_unit.setdefault(budget.unit, {})[grant_id] = budget.amount
        return by_unit

    def _cost(self, call: Call, tokens: tuple[int, int] | None) -> dict[str, int]:
        """What a call costs in each budget unit: calls always 1; tokens and money for model calls;
        money for a GPU lease of a type the policy prices (``count`` GPUs for ``hold_s``, else
        ``ttl_s``, seconds: ``policy._schema.lease_cost``). Raises ``InputError`` for a priced
        lease call whose count or time is not one (nothing is recorded then)."""
        cost = {"calls": 1}
        gpu = (
            self.policy.document.gpus.get(call.resource.removeprefix("gpu:"))
            if call.resource.startswith("gpu:")
            else None
        )
        if gpu is not None:
            args = call.args
            try:
                micros = gpu.lease_cost(args["count"], args["hold_s"] if "hold_s" in args else args["ttl_s"])
            except (KeyError, ValueError) as exc:
                raise InputError(f"{call.resource}: the lease cannot be priced: {exc}") from exc
            cost["usd_micros"] = cost["micro_usd"] = micros
        elif tokens is not None and call.resource.startswith("model:"):
            prompt, output = _token_counts(tokens)
            cost["tokens"] = prompt + output
            spec = self.policy.document.models.get(call.resource.removeprefix("model:"))
            if spec is not None:
                # Integers only, rounded up: a float would round large counts and lose micro-dollars.
                per_million = prompt * spec.cost_per_mtok.input + output * spec.cost_per_mtok.output
                cost["usd_micros"] = cost["micro_usd"] = -(-per_million // 1_000_000)
        return cost

    # --- running --------------------------------------------------------------------------

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
        failed: Callable[[T], bool] | None = None,
        spent: Callable[[T], tuple[int, int] | None] | None = None,
        paused: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """Run ``fn`` for an allowed call (tools under the scheduler), audit the outcome, settle the budget.

        Raises ``Denied`` for an authorization that is not an allow, ``SchedulingError`` once
        ``close`` began. Re-raises what ``fn`` (or the scheduler: ``Overloaded``,
        ``DeadlineExceeded``, ``CircuitOpen``) raises, after recording the failure and releasing
        the reservation; what ``failed`` or ``spent`` raises, after recording an error outcome
        charged as reserved (the call ran). ``fn`` gets no idempotency key, so a tool that
        ``takes_idempotency_key`` is not repeated after an ambiguous failure (docs/tasks.md).
        An exception for which ``paused`` is true is a pause, not a failure (LangGraph's
        ``interrupt()`` inside a tool): the outcome is ``paused``, the reservation released, and
        an approval the call consumed is put back for this call, to be replayed when it resumes.
        ``InputError`` (nothing run or written) for an ``auth`` that is not an ``Authorization`` or
        an ``fn`` that is not callable.
        """
        self._check_allowed(auth, fn)
        self._begin_run(auth)
        started = False  # whether an attempt reached ``fn``
        raised: list[BaseException] = []  # what ``fn`` itself raised (a nested call's refusal too)
        try:
            with self._span(auth, call_id) as span:
                try:
                    if auth.call.resource.startswith("tool:"):

                        def attempt(_attempt: Attempt) -> T:
                            nonlocal started
                            started = True
                            try:
                                return fn()
                            except BaseException as exc:
                                raised.append(exc)
                                raise

                        result = self._sync().submit(self._tool_call(auth, call_id, run_id, paused), attempt)
                    else:
                        started = True
                        result = fn()
                except BaseException as exc:
                    self._fail(span, auth, exc, paused, started=started, ran=exc in raised)
                    raise
                self._finish(span, auth, result, failed, spent)
                return result
        finally:
            self._end_run(auth)

    async def arun(
        self,
        auth: Authorization,
        fn: Callable[[], Awaitable[T]],
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        failed: Callable[[T], bool] | None = None,
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
        call is started once an attempt entered ``fn``."""
        self._check_allowed(auth, fn)
        loop = asyncio.get_running_loop()
        self._begin_run(auth, loop)
        started = False  # whether an attempt reached ``fn``
        returned: list[T] = []  # what an attempt returned, should a cancellation follow it
        raised: list[BaseException] = []  # what ``fn`` itself raised (a nested call's refusal too)
        try:
            with self._span(auth, call_id) as span:
                try:
                    if auth.call.resource.startswith("tool:"):

                        async def attempt(_attempt: Attempt) -> T:
                            nonlocal started
                            started = True
                            try:
                                value = await _result_of(fn)
                            except BaseException as exc:
                                raised.append(exc)
                                raise
                            returned.append(value)
                            return value

                        result = await (await self._async()).submit(
                            self._tool_call(auth, call_id, run_id, paused), attempt, preemptible=preemptible
                        )
                    else:
                        started = True
                        result = await _result_of(fn)
                except asyncio.CancelledError as exc:
                    if returned:  # the call ran to its end: recorded and charged as it ended
                        self._finish(span, auth, returned[-1], failed, spent)
                    else:
                        if began is not None:  # whether the work began, not just an attempt
                            started = began() and started
                        self._fail(span, auth, exc, paused, started=started)
                    raise
                except BaseException as exc:
                    self._fail(span, auth, exc, paused, started=started, ran=exc in raised)
                    raise
                self._finish(span, auth, result, failed, spent)
                return result
        finally:
            self._end_run(auth, loop)

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
            if not self._outcomes_closed:  # close() flushes after this, under the same lock
                self._settle(auth, "error", "SchedulingError", None, started=False)
        raise SchedulingError(f"{auth.call.resource}: the gate is closed; the call was not run")

    def _end_run(self, auth: Authorization, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """A ``run``/``arun`` settled (its outcome is pending) or failed to: count it out."""
        with self._runs_changed:
            self._runs -= 1
            if loop is not None:
                left = self._loop_runs[loop] - 1
                if left:
                    self._loop_runs[loop] = left
                else:
                    del self._loop_runs[loop]
            if not self._runs:
                self._runs_changed.notify_all()
            lost = self._outcomes_closed
        if lost:
            _outcome_lost(auth)

    def _span(self, auth: Authorization, call_id: str | None = None) -> AbstractContextManager[Span]:
        """The GenAI span of the call (``execute_tool NAME`` or ``chat MODEL``) with the decision on it.

        No span at all while the gate traces through the global tracer and no tracer provider is
        installed: nothing could record it (the current span, and so the context a tool sees,
        stays what it was). A provider installed later is used from the next call on.
        """
        if self._global_tracer and isinstance(trace.get_tracer_provider(), ProxyTracerProvider):
            return nullcontext(INVALID_SPAN)
        return self._open_span(auth, call_id)

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
                    audit_index=auth.audit_index,
                    # As the audit log keeps them: values the policy does not mark loggable hidden.
                    reason="; ".join(
                        redact_reasons(
                            auth.reasons, auth.call.args, self._loggable(auth.call), self._declared(auth.call)
                        )
                    )[:200]
                    or None,
                )
                if identity is not None:
                    span.set_attribute("gen_ai.agent.name", identity.name)
            yield span

    def _fail(
        self,
        span: Span,
        auth: Authorization,
        exc: BaseException,
        paused: Callable[[BaseException], bool] | None,
        *,
        started: bool,
        ran: bool = False,
    ) -> None:
        """Settle a call that ``exc`` ended: ``paused`` if ``paused`` says so (LangGraph's
        ``interrupt()``: not a failure of the call, and its span says so), else ``error``.
        ``started``: whether an attempt reached the call's function; a call that never did (the
        scheduler refused it, or its caller was cancelled while it waited for a slot) is
        recorded as not run, so a once-only call runs when its run is resumed. ``ran``: ``exc``
        came out of the call's function itself; a scheduler refusal it raised (a nested gated
        call's ``CircuitOpen``, after the call paid) is the call's failure, not a refusal of it."""
        pause = paused is not None and paused(exc)
        if pause and span.is_recording():
            record_outcome(span, "paused")
        error = type(exc).__name__
        started = started and (ran or error not in NOT_STARTED)
        if isinstance(exc, NoBackend | BackendFailed) and str(exc):
            # Why the backends failed (an HTTP 302, garbage, no answer in time) belongs in the
            # evidence, not only in the gateway's log; the message names no backend key (scrubbed).
            error = f"{error}: {str(exc)[:MAX_ERROR_DETAIL]}"
        elif not started and not pause and error not in NOT_STARTED:
            error = f"{error}: {NOT_STARTED_DETAIL}"
        usage = usage_after(auth, exc) if started else None
        self._settle(auth, "paused" if pause else "error", error, usage, started=started)

    def abandon(self, auth: Authorization, why: str = NOT_STARTED_DETAIL) -> None:
        """Settle an allow whose call will never run (its caller was cancelled between the
        decision and the run): an ``error`` outcome saying ``why``, its reservation released, a
        once-only call left as not run (a resumed run runs it). The allow cannot be used after.

        Raises ``Denied`` for a refusal or an allow already used (``run``, ``arun``, ``abandon``),
        ``InputError`` for an ``auth`` that is not an ``Authorization``.
        """
        self._check_allowed(auth)
        with self._runs_changed:
            if not self._outcomes_closed:  # close() flushes after this, under the same lock
                self._settle(auth, "error", f"CancelledError: {why}", None, started=False)
                return
        _outcome_lost(auth)

    def _finish(
        self,
        span: Span,
        auth: Authorization,
        result: T,
        failed: Callable[[T], bool] | None,
        spent: Callable[[T], tuple[int, int] | None] | None,
    ) -> None:
        """Settle a call that ran and returned ``result``: ``spent`` reads its usage, ``failed``
        says whether it failed. When either raises, the call is settled as an ``error`` charged
        as reserved (it ran; what it cost cannot be read) and the exception is re-raised."""
        try:
            usage = spent(result) if spent is not None else None
            status = "error" if failed is not None and failed(result) else "ok"
        except BaseException as exc:
            self._settle(auth, "error", type(exc).__name__, USAGE_UNREAD)
            raise
        if span.is_recording():
            if usage is not None:
                with contextlib.suppress(TypeError, ValueError):  # garbage usage: charged at settlement
                    record_usage(span, *usage)
            record_outcome(span, status)
        self._settle(auth, status, None, usage)

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

    def _check_allowed(self, auth: Authorization, fn: object = _NO_FN) -> None:
        """Refuse (``Denied``) a refusal, an allow this Gate did not decide (or one changed since),
        and an allow that was already used: one decision, one run. ``InputError`` first, the
        allow left unused, for an ``auth`` that is not an ``Authorization`` and for an ``fn`` (the
        function ``run``/``arun`` is to run) that cannot be called."""
        expect(auth, Authorization, "auth", _AUTHORIZATION)
        if fn is not _NO_FN and not callable(fn):
            raise InputError(f"fn must be the function that makes the call, got {shown(fn)}")
        if not auth.allowed or auth.audit_index is None:
            refused = ApprovalRequired if auth.needs_approval else Denied
            raise refused(self.explain_redacted(auth), auth.decision)
        if auth._use.sealed != self._seal(auth):
            raise Denied(
                f"the authorization of {auth.call.resource} was not decided by this Gate (built by hand, "
                "changed after the decision, or another Gate's): decide the call with Gate.authorize",
                auth.decision,
            )
        if not auth._use.take():
            raise Denied(
                f"the authorization of {auth.call.resource} (audit entry {auth.audit_index}) was already "
                "used: an allow runs its call once; decide the call again",
                auth.decision,
            )

    def explain_redacted(self, auth: Authorization) -> str:
        """``auth.explain()`` as the audit log would keep it: values of arguments the policy does
        not mark loggable replaced. For text that may reach logs (a raised ``Denied``); the model
        is told ``explain()`` itself, its own arguments included."""
        redacted = redact_reasons(
            auth.reasons, auth.call.args, self._loggable(auth.call), self._declared(auth.call)
        )
        return replace(auth, reasons=tuple(redacted)).explain()

    def _settle(
        self,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        *,
        started: bool = True,
    ) -> None:
        # The decision was durable before the call ran; the outcome and its budget settlement
        # (one transaction for both) ride with the next decision or the background commit.
        self._outcomes.put((auth, status, error, usage, started))

    def _write_outcomes(self, batch: list[PendingOutcome]) -> None:
        try:
            with self._carrying(batch):
                pass
        except AgentGateError as exc:
            # Kept, not dropped: a store that was restarted or unreachable takes them at a later
            # commit (a decision's, or this thread's, retried once a second).
            self._outcomes.restore(batch, retry_after_s=OUTCOME_RETRY_S)
            _log.error("agentgate: %d outcomes not recorded yet (kept, retried): %s", len(batch), exc)
        except BaseException:  # Ctrl-C or SIGTERM in the commit: kept for the flush at exit
            self._outcomes.restore(batch)
            raise

    def _carry_all(self, tx: Transaction, batch: list[PendingOutcome]) -> None:
        """Write every outcome of ``batch`` first thing in ``tx``, without a savepoint; raise
        ``_CarryFailed`` when one cannot be written, for the caller to roll ``tx`` back whole
        (nothing else is in it) and write them with ``_carry``. Outcomes nearly always can be
        written: the savepoint that guarded them cost two statements per decision (about 10 us
        on SQLite, two round trips on PostgreSQL)."""
        try:
            for outcome in batch:
                self._write_outcome(tx, *outcome)
        except Exception as exc:  # also an unforeseen one: it must not fail every later decision
            raise _CarryFailed from exc

    def _carry(self, tx: Transaction, batch: list[PendingOutcome]) -> list[PendingOutcome]:
        """Write ``batch`` in ``tx`` under a savepoint; the outcomes the store refused, to be
        tried again once ``tx`` has committed.

        An outcome that cannot be written (logged) never takes the others, or the decision that
        carries them, down with it. Its reservation stays held, which can only make a budget
        look smaller, never let it be overspent. One savepoint for the batch; one per outcome
        only after the batch failed. (Decisions try ``_carry_all`` first.) An outcome the store
        refused (``StoreError``, a driver error: a trigger, a lock timeout on its budget row) is
        returned, to be tried again for ``OUTCOME_RETRY_FOR_S``; one refused for its own sake
        (anything else) is dropped at once."""
        if not batch:
            return []
        tx.execute("SAVEPOINT agentgate_outcomes")
        # Any exception, not only the store's: one outcome that cannot be written for a reason
        # nobody foresaw (a backend's garbage usage) must not put itself back before every later
        # decision and fail them all, nor end the thread that commits outcomes.
        try:
            for outcome in batch:
                self._write_outcome(tx, *outcome)
        except Exception:
            tx.execute("ROLLBACK TO SAVEPOINT agentgate_outcomes")
            tx.execute("RELEASE SAVEPOINT agentgate_outcomes")
            refused: list[PendingOutcome] = []
            for outcome in batch:
                tx.execute("SAVEPOINT agentgate_outcome")
                try:
                    self._write_outcome(tx, *outcome)
                except Exception as exc:
                    tx.execute("ROLLBACK TO SAVEPOINT agentgate_outcome")
                    if self._try_again(outcome[0], exc):
                        refused.append(outcome)
                    else:
                        _log.error(
                            "agentgate: outcome of audit entry %s not recorded: %s",
                            outcome[0].audit_index,
                            exc,
                        )
                tx.execute("RELEASE SAVEPOINT agentgate_outcome")
            return refused
        tx.execute("RELEASE SAVEPOINT agentgate_outcomes")
        return []

    def _try_again(self, auth: Authorization, exc: Exception) -> bool:
        """Whether an outcome that ``exc`` kept from being written is to be tried again (see
        ``_carry``); logged when it is."""
        if not isinstance(exc, (StoreError, *self.store.driver_errors)):
            self._outcome_refused_at.pop(id(auth), None)  # dropped: its id may name another one later
            return False
        now = time.monotonic()
        first = self._outcome_refused_at.setdefault(id(auth), now)
        if now - first > OUTCOME_RETRY_FOR_S:
            del self._outcome_refused_at[id(auth)]
            return False
        _log.warning(
            "agentgate: outcome of audit entry %s not recorded yet (kept, retried): %s", auth.audit_index, exc
        )
        return True

    def _write_outcome(
        self,
        tx: Transaction,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        started: bool,
    ) -> None:
        identity = auth.identity
        reasons = [error] if error else []
        actual = None
        if usage is USAGE_UNREAD:
            reasons.append("the call ran but its usage could not be read; charged as reserved")
        elif usage is None:
            if status == "ok" and auth.reservations and auth.call.resource.startswith("model:"):
                reasons.append("no usage was reported; charged as reserved")
        else:
            actual = self._reported_cost(auth, usage, reasons)
        delta = self._settle_reservations(
            tx, auth, status == "ok" or actual is not None or usage is USAGE_UNREAD, actual, reasons
        )
        if auth.once_key is not None:
            self.once.finish(tx, auth.once_key, _once_state(status, started))
        if (status == "paused" or not started) and auth.approver:
            self._rearm_approval(tx, auth, status, reasons)
        self.audit.append(
            {
                "kind": "outcome",
                "principal": identity.did if identity else "unknown",
                "chain_hash": identity.grant_id if identity else None,
                "resource": auth.call.resource,
                "status": status,
                "ref": auth.audit_index,
                "budget_delta": delta,
                "reasons": [recordable(r) for r in reasons],
            },
            tx,
        )
        if self._outcome_refused_at:  # written (if ``tx`` commits): no longer one being retried
            self._outcome_refused_at.pop(id(auth), None)

    def _reported_cost(
        self, auth: Authorization, usage: tuple[int, int], reasons: list[str]
    ) -> dict[str, int] | None:
        """What the ``usage`` a call reported costs in each budget unit, its output capped at the
        call's ``max_tokens``; ``None`` for usage that is not two token counts (the reservation
        is charged whole). Why a cost differs from what was reported is added to ``reasons``."""
        try:
            charged = _output_capped(usage, auth.output_tokens)
            actual = self._cost(auth.call, charged)
        except InputError:  # garbage from a backend: the whole reservation is charged
            reasons.append(
                f"reported usage {_bounded_repr(usage)} is not two token counts; charged as reserved"
            )
            return None
        if charged is not usage:
            over = (
                f"the backend reported {usage[1]} completion tokens, over the call's max_tokens "
                f"of {charged[1]}; charged {charged[1]}"
            )
            reasons.append(over)
            _log.warning("agentgate: audit entry %s: %s", auth.audit_index, over)
        return actual

    def _settle_reservations(
        self,
        tx: Transaction,
        auth: Authorization,
        charge: bool,
        actual: Mapping[str, int] | None,
        reasons: list[str],
    ) -> int:
        """Commit ``auth``'s reservations at their ``actual`` cost (else as reserved) when
        ``charge``, else release them; returns what the caller's own budget was charged. An
        overrun is added to ``reasons``."""
        delta = 0
        for position, (reservation, unit, amount) in enumerate(auth.reservations):
            if charge:
                used = actual.get(unit, amount) if actual is not None else amount
                # The call has run: its cost is recorded even when it overruns what was left.
                short = self.ledger.commit(reservation, used, tx, exhaust=True)
                if short:
                    reasons.append(f"overran the {unit} budget by {short}; the budget is exhausted")
                if position == 0:  # the unit of the caller's own budget (``_caps``)
                    delta = used
            else:
                self.ledger.release(reservation, tx)
        return delta

    def _rearm_approval(self, tx: Transaction, auth: Authorization, status: str, reasons: list[str]) -> None:
        """Open again the approval request an approved call used when the call paused before
        completing or did not start, so that the resumed call asks for the same request."""
        request = auth.request
        if not (
            request and request.get("id") and self.approvals.rearm(request["id"], request["call_hash"], tx=tx)
        ):
            return
        when = "paused before completing" if status == "paused" else "not started"
        reasons.append(f"{when}: approval request {request['id']} is pending again")
        if request.get("asked_index") is not None:  # the resumed call asks for the same request
            with self._lock:
                self._open_requests[request["call_hash"]] = (
                    request["id"],
                    request["asked_index"],
                    float(request["expires_at"]),
                )

    @_serialized
    def flush(self) -> None:
        """Commit every outcome pending now (failures are logged; see ``_carry``)."""
        self._outcomes.flush()

    # --- model dispatch -------------------------------------------------------------------

    def attach_dispatcher(self, dispatcher: Dispatcher) -> None:
        """Serve model calls through ``dispatcher`` (``dispatch.Dispatcher``), which runs on a
        private event loop thread owned by the gate until ``close()``. A model the policy gives a
        ``slo.ttft_ms`` is routed under it, unless the dispatcher was given its own for it."""
        dispatcher.model_slo_ttft_s = {**model_slos(self.policy), **dispatcher.model_slo_ttft_s}
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="agentgate-dispatch", daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(dispatcher.start(), loop).result()
        self._dispatch = (dispatcher, loop, thread)

    @property
    def dispatches(self) -> bool:
        """Whether a dispatcher is attached."""
        return self._dispatch is not None

    def dispatch(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> ChatResult:
        """Route and send an OpenAI-style chat payload (blocking). ``session``: the conversation
        (an agent run's thread) whose earlier calls' backend holds its prefix in cache, kept when
        it meets the SLO (docs/dispatch.md). Raises ``DispatchError`` when no dispatcher is
        attached, and what ``Dispatcher.chat`` raises (``NoBackend``, ``Shed``, ``BackendFailed``)."""
        return self._send(lambda d: d.chat(payload, tenant=tenant, session=session)).result()

    async def adispatch(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> ChatResult:
        """The async twin of ``dispatch``: awaits the dispatcher's loop without blocking this one."""
        return await asyncio.wrap_future(
            self._send(lambda d: d.chat(payload, tenant=tenant, session=session))
        )

    def dispatch_stream(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> Iterator[ChatChunk]:
        """Route and stream an OpenAI-style chat payload: the chunks as the backend sends them
        (blocking iterator). Raises as ``dispatch`` does, before or between chunks (a stream that
        breaks after output: ``BackendFailed``). Leaving the loop early, or closing the iterator,
        cancels the call on the backend."""
        chunks: queue.SimpleQueue[ChatChunk | BaseException | None] = queue.SimpleQueue()
        relay = self._relay(payload, tenant, session, chunks.put)
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            relay.cancel()

    async def adispatch_stream(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> AsyncIterator[ChatChunk]:
        """The async twin of ``dispatch_stream``: awaits each chunk without blocking this loop."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[ChatChunk | BaseException | None] = asyncio.Queue()

        def put(item: ChatChunk | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # this loop closed: nobody reads any more
                loop.call_soon_threadsafe(chunks.put_nowait, item)

        relay = self._relay(payload, tenant, session, put)
        try:
            while (item := await chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            relay.cancel()

    def _relay(
        self,
        payload: Mapping[str, Any],
        tenant: str,
        session: str | None,
        put: Callable[[ChatChunk | BaseException | None], None],
    ) -> concurrent.futures.Future[None]:
        """Stream on the dispatcher's loop, handing each chunk to ``put``, then ``None`` at the
        end or the exception that ended it. The stream runs whole on that loop (an async
        generator cannot move between loops); cancelling the future returned cancels it there,
        which closes the backend's connection. The stream carries the trace context of the span
        current where it is asked for (``Dispatcher.stream``), not the loop thread's."""
        caller = otel_context.get_current()

        async def pump(dispatcher: Dispatcher) -> None:
            traced = otel_context.attach(caller)  # this task's own context: detached when it ends
            try:
                async for chunk in dispatcher.stream(payload, tenant=tenant, session=session):
                    put(chunk)
            except BaseException as exc:  # CancelledError too: the reader is gone, or the gate closes
                put(exc)
                raise
            finally:
                otel_context.detach(traced)
            put(None)

        return self._send(pump)

    def _send(self, call: Callable[[Dispatcher], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Hand ``call(dispatcher)`` to the dispatcher's loop. The coroutine is made first, then
        handed over under ``_dispatch_lock``, which ``_close_dispatcher`` takes to detach the
        dispatcher: a call that raced ``close`` is refused with ``DispatchError``, never handed to
        a loop stopped or closed under it (it would wait for ever, or raise ``RuntimeError``)."""
        attached = self._dispatch
        if attached is None:
            raise DispatchError(self._no_dispatcher())
        sent = call(attached[0])
        with self._dispatch_lock:
            if self._dispatch is not attached:
                sent.close()
                raise DispatchError(self._no_dispatcher())
            return asyncio.run_coroutine_threadsafe(sent, attached[1])

    def _no_dispatcher(self) -> str:
        if self._dispatch_closed:
            return "the gate is closed: its dispatcher takes no more calls"
        return "no dispatcher is attached to this gate (Gate.attach_dispatcher)"

    def _close_dispatcher(self) -> None:
        with self._dispatch_lock:
            if self._dispatch is None:
                return
            dispatcher, loop, thread = self._dispatch
            self._dispatch = None
            self._dispatch_closed = True
        asyncio.run_coroutine_threadsafe(dispatcher.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    # --- evidence -------------------------------------------------------------------------

    @_serialized
    def remaining(self, identity: AgentIdentity) -> dict[str, tuple[int, int]]:
        """Per grant of the identity's chain that has a budget: (spent, limit). ``InputError`` for
        an ``identity`` that is not an ``AgentIdentity``."""
        expect(identity, AgentIdentity, "identity", _IDENTITY)
        self.flush()
        return {
            link.id: (self.ledger.spent(link.id), link.budget.amount)
            for link in identity.chain.links
            if link.budget is not None
        }

    @_serialized
    def verify(self) -> VerifyReport:
        """Sign a checkpoint, then recompute the audit log's tree and check every checkpoint."""
        self.flush()
        self.audit.checkpoint()
        return self.audit.verify()


def _quota_exceeded(full: QuotaRef, amounts: Mapping[str, int]) -> QuotaExceeded:
    """The error for a call that policy quota ``full`` cannot hold now, or ever."""
    quota = f"{full.limit} {full.unit} per {full.window_s} s for {full.subject}"
    alone = amounts.get(full.unit, 0)
    return QuotaExceeded(
        f"quota {full.name} allows {quota} and this call alone counts {alone}: it can never fit"
        if alone > full.limit
        else f"quota {full.name} reached: {quota}"
    )


def _once_state(status: str, started: bool) -> OnceState:
    """The state a call that must run once is left in by an outcome of ``status``."""
    if status == "ok":
        return "ok"
    if status == "paused":
        return "paused"
    return "error" if started else "not_run"
