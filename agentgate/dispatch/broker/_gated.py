"""The broker under agentgate's authority: a lease is decided and audited before it is queued.

``Broker`` itself knows tenants and priorities, not authority: anyone holding it may queue work
for any tenant at any priority. ``GatedBroker`` is the door agents use. A request is a call on
``gpu:TYPE`` (the GPU type in lower case, e.g. ``gpu:h100``) with the arguments ``count`` (GPUs),
``priority``, ``ttl_s``, ``grace_s`` and ``timeout_s`` (the request's, or the broker's defaults)
and ``request`` (its id), decided by the ``Gate`` exactly as a tool call is: the caller's grant
chain and the policy must allow it, and the decision is in the audit log before the broker sees
the request. Since priority and a long grace are what let one lease keep or take GPUs from
another, a policy can bound them like any argument (``priority: {le: 1}``, ``grace_s: {le:
600}``). The tenant whose quota pays is the one the policy gives the identity's principal
(``Gate.tenant_of``), the holder is the identity's DID; neither is the caller's to choose. Only
the holder may release or renew its lease, and a renewal is decided again (a revoked or expired
grant cannot keep its GPUs). What happens to a lease afterwards (granted, notified of preemption,
ended, timed out) is appended to the log as an ``outcome`` entry that refers to the decision.

The link from a lease to its decision lives in the store (``store/broker_decisions.py``), not in
the process: a ``GatedBroker`` started after a restart, over the same store and a broker restored
from its journal, audits the leases decided before the restart against their own decisions and
settles their budgets. GPU time costs what the policy says (``gpus: {TYPE: {cost_per_gpu_hour:
...}}``): the decision of a request reserves ``count`` x ``ttl_s`` at that price, a renewal the
time it adds, and the lease's end settles the time actually held, rounded up to the second, and
returns the rest.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass
from typing import Literal, NoReturn

from agentgate.audit.spans import lease_outcome_span
from agentgate.capabilities import Call, canonical_resource
from agentgate.dispatch.broker._broker import Broker
from agentgate.dispatch.broker._model import (
    BrokerEvent,
    CheckpointNotice,
    GangRequest,
    Granted,
    Lease,
    LeaseEnded,
    TimedOut,
    Withdrawn,
)
from agentgate.errors import AuditError, BrokerError, CapabilityError, Denied, LeaseLost, StoreError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.policy._schema import lease_cost
from agentgate.store import Transaction
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision, Reservation

_MONEY = ("usd_micros", "micro_usd")
"""The budget units a lease's price is reserved in (the Gate prices money under both names)."""

Held = tuple[int, float] | Literal["reserved"] | None
"""What a lease's end is charged for: the GPUs and seconds it held, everything reserved for it
(a granted lease lost in a restart), or nothing (``None``: it never held GPUs)."""


@dataclass(frozen=True)
class GatedRequest:
    """The answer to one gated request: the decision, and what the broker did if it was allowed."""

    authorization: Authorization
    """The Gate's decision, already in the audit log (``authorization.audit_index``)."""
    events: tuple[BrokerEvent, ...] = ()
    """What the broker did in that call (a grant of this request, notices to its victims...);
    empty when the request was refused."""

    @property
    def allowed(self) -> bool:
        return self.authorization.allowed

    @property
    def needs_approval(self) -> bool:
        """Whether a human approval is asked for (``authorization.approval_payload()``)."""
        return self.authorization.needs_approval

    def lease(self) -> Lease | None:
        """This request's lease if the broker granted it at once; ``None`` if it waits or was refused."""
        own = self.authorization.call.args.get("request")
        return next((e.lease for e in self.events if isinstance(e, Granted) and e.lease.id == own), None)


class GatedBroker:
    """``broker`` behind ``gate``: decide, audit, then queue; audit every change of the lease.

    ``name`` is the broker's name in the store, the same as its journal's
    (``BrokerLeaseStore(store, broker=name)``). Calls are serialized: each one decides through the
    Gate, whose decisions run one at a time anyway.
    """

    def __init__(self, gate: Gate, broker: Broker, *, name: str = "default") -> None:
        self.gate = gate
        self.broker = broker
        self.decisions = BrokerDecisionStore(gate.store, name)
        self._lock = threading.RLock()
        self._unrecorded: list[BrokerEvent] = []
        """Events taken from the broker whose outcome could not be recorded yet (the store
        failed): recorded first at the next call, in order."""

    def submit(
        self, identity: AgentIdentity | None, request: GangRequest, *, approval: Approval | None = None
    ) -> GatedRequest:
        """Decide ``request`` for ``identity``; if allowed, queue it with the policy's tenant and the DID.

        Behind an approval gate of the policy the answer is ``needs_approval`` (nothing queued;
        ``authorization.approval_payload()`` is what an approver signs, e.g. with ``agentgate
        approval sign``); the same request submitted again with the signed ``approval`` is decided
        with it, once. A GPU type the policy prices has ``count`` x ``ttl_s`` reserved from the
        chain's budgets with the decision; a budget too small for it refuses the request, naming
        the budget. The request is queued with its ``timeout_s`` cut to the time the grant chain
        has left less ``ttl_s``: one that waits longer times out rather than be granted a lease
        that would outlive the chain. Never raises for a refused request (the refusal is audited
        and returned).
        Raises ``BrokerError`` for a request without ``gpu_type`` (a grant covers ``gpu:TYPE``, so
        the type must be known before the decision), a type that is no resource name, an id
        of the caller's own request that is live through a ``GatedBroker`` of this name, or a
        ``ttl_s`` that would outlive the identity's grant chain (before any decision); and,
        after an allowed decision, an id another holder's live request has (so that a caller the
        policy refuses cannot tell another tenant's ids from free ones), or whatever
        ``Broker.submit`` raises (an unknown tenant, a duplicate id, a gang that could never be
        placed), with an ``error`` outcome appended and the reservation returned first; except a ``StoreError`` from the broker's journal after
        the broker took the request: the request stands (the broker's events come out of the
        next call), linked to its decision, its reservation held. A ``StoreError`` recording the
        allowed request's decision (before the broker sees it) returns the reservation and
        appends an ``error`` outcome first; one recording an earlier call's events raises before
        any decision (those events are recorded first, see ``_record``).
        """
        resource = _resource(request)
        with self._lock:
            self._record([])  # what an earlier call could not record comes first
            live = self.decisions.get(request.id)
            if live is not None and identity is not None and live.principal == identity.did:
                raise BrokerError(f"request {request.id!r} is already live")
            if identity is not None and (left := _outlived(identity, self._ttl(request))) is not None:
                raise BrokerError(f"request {request.id!r}: {left}")
            call = self._call(resource, request, self._ttl(request))
            auth = self.gate.authorize(identity, call, approval=approval, call_id=request.id)
            if not auth.allowed:
                return GatedRequest(auth)
            assert identity is not None
            self.gate.trace_allowed(auth)  # the refusal's span is the Gate's; the allow's is made here
            decided = LeaseDecision(
                request.id,
                identity.did,
                identity.grant_id,
                resource,
                auth.audit_index,
                self._price(resource),
                _held(auth),
            )
            if live is not None:  # another holder's: said only once the policy allowed the caller
                self._refuse_taken(decided)
            # Written right after the decision's transaction, which Gate.authorize commits on its
            # own, and before the broker sees the request: no lease exists without its link. A
            # crash between the two leaves the reservation held (a budget can look smaller,
            # never be overspent) and no lease.
            try:
                self.decisions.add(decided)
            except StoreError as exc:
                # The allow is committed, the broker never sees the request: its reservation is
                # returned and the allow closed with an ``error`` outcome (until review R40 it
                # stayed held with no outcome). If the store fails for that too, the reservation
                # stays held: a budget can look smaller, never be overspent.
                self._abandon(decided, f"the lease's decision could not be recorded: {exc}")
                raise
            owned = dataclasses.replace(
                request,
                tenant=self.gate.tenant_of(identity),
                holder=identity.did,
                timeout_s=min(request.timeout_s, _wait_left(identity, self._ttl(request))),
            )
            try:
                events = self.broker.submit(owned)
            except Exception as exc:
                if isinstance(exc, StoreError) and self._live(request.id):
                    # The broker took the request and only its journal write failed (StoreError):
                    # the lease stands, its events come out of the next call, so its decision
                    # stays linked and its budget reserved.
                    raise
                self._end(request.id, decided.principal, resource, "error", str(exc) or type(exc).__name__)
                raise
            self._record(events)
        return GatedRequest(auth, tuple(events))

    def release(self, identity: AgentIdentity, lease_id: str) -> list[BrokerEvent]:
        """End ``identity``'s lease (or withdraw its waiting request); the events are audited.

        The lease's budget is settled at the time it was held. Raises ``LeaseLost`` when the
        lease or request is not live, or is another holder's (one answer for both: another
        tenant's live ids are not told). Releasing needs no decision: giving GPUs back is always
        allowed.
        """
        with self._lock:
            self._record([])
            self._holder_request(identity, lease_id)
            events = self.broker.release(lease_id)
            self._record(events)
        return events

    def renew(self, identity: AgentIdentity, lease_id: str) -> Lease:
        """Extend ``identity``'s live lease, decided again like the request (audited).

        The renewal reserves the time it adds to the lease (from its current expiry, or notice
        deadline, to ``ttl_s`` from now) at the policy's price. Raises ``Denied`` when the
        renewal is refused (the grant was revoked or has expired, no longer covers the lease,
        expires before ``ttl_s`` from now, or its budget cannot pay for the extension),
        ``LeaseLost`` when it is not live or is another holder's (nothing is reserved then), ``StoreError`` when the broker's journal write
        fails (the lease is renewed all the same, and its extension reserved).
        """
        with self._lock:
            self._record([])
            self._record(self.broker.advance())  # a lease that expired meanwhile is not renewed
            request = self._holder_request(identity, lease_id)
            lease = next((held for held in self.broker.leases() if held.id == lease_id), None)
            if lease is None:
                # Still waiting: there is no lease to extend, and the broker would refuse it after
                # an allow that nothing settles (until review R40 an ``allow`` of the renewal was
                # audited all the same, with no outcome).
                raise LeaseLost(
                    f"lease {lease_id!r} is not granted yet: a waiting request has nothing to renew"
                )
            resource = _resource_or_any(request)
            call = self._call(resource, request, self._extension(request, lease))
            if (left := _outlived(identity, self._ttl(request))) is not None:
                reason = f"renewal of lease {lease_id!r} refused: {left}"
                raise Denied(reason, self.gate.record_refusal(identity, call, (reason,)).decision)
            # A lease behind an approval gate was approved when it was granted: its renewals are
            # not asked again (an approval is for one call; ``approval_gates=False``). What a
            # renewal checks is the authority, and its budget, reserved with the allow.
            auth = self.gate.authorize(identity, call, approval_gates=False)
            if not auth.allowed:
                raise Denied(f"renewal of lease {lease_id!r} refused: {auth.explain()}", auth.decision)
            self.gate.trace_allowed(auth)
            held = _held(auth)
            try:
                renewed = self.broker.renew(lease_id)
            except LeaseLost:
                # The lease ended while the renewal was decided (its expiry or grace end fell
                # between the two reads of the clock): the allow is settled as an ``error``
                # outcome, its reservation returned, in one transaction.
                renewal = LeaseDecision(
                    lease_id, identity.did, identity.grant_id, resource, auth.audit_index, None, held
                )
                with self.gate.store.transaction() as tx:
                    self.gate.audit.lock(tx)
                    self._settle(tx, renewal, None)
                    ended = f"lease {lease_id!r} ended before it was renewed"
                    index = self._append(renewal, "error", ended, 0, tx)
                self._outcome_span(renewal, "error", index)
                self._record_pending()
                raise
            except StoreError:
                # The broker renewed the lease and only its journal write failed: the lease runs
                # the time this renewal added, so the lease keeps what was reserved to pay for it.
                self._link(identity, lease_id, resource, auth, held)
                raise
            self._link(identity, lease_id, resource, auth, held)
            self._record_pending()
        return renewed

    def _record_pending(self) -> None:
        """Audit the events ``Broker.renew`` caused (other leases' expiries and grace ends, the
        grants that follow), which it journals but does not return. Until review R40 they waited
        for the next call: a restart before it lost them from the log although the journal had
        them, and ``reconcile`` then returned an expired lease's reservation whole, its holder
        never charged for the time it held. A journal write that fails leaves them queued in the
        broker for its next call, as any call's events; an outcome that cannot be recorded leaves
        them with this GatedBroker, recorded first at its next call (the renewal stands)."""
        try:
            self._record(self.broker.advance())
        except (StoreError, AuditError):  # an outcome entry the log refused: as the store's error
            return

    def _link(
        self,
        identity: AgentIdentity,
        lease_id: str,
        resource: str,
        auth: Authorization,
        held: tuple[Reservation, ...],
    ) -> None:
        """Add a renewal's reservations to its lease's decision, settled when the lease ends: each
        merged into the lease's reservation of its unit taken from the same chain
        (``BudgetLedger.merge``), so that however often a lease is renewed its decision holds one
        reservation per unit and chain, not one per renewal; one that has none is added."""
        if held and self._merge(lease_id, held):
            return
        if not self.decisions.add_reservations(lease_id, held):
            # Queued around the gate: this renewal is the first decision the gate made for it.
            # Its lease was granted (only a live lease is renewed), which a ``lease_granted``
            # outcome of this decision says, so that ``reconcile`` charges the lease if a restart
            # loses it (review R42: its grant, logged before any decision, refers to none).
            linked = LeaseDecision(
                lease_id,
                identity.did,
                identity.grant_id,
                resource,
                auth.audit_index,
                self._price(resource),
                held,
            )
            with self.gate.store.transaction() as tx:
                self.gate.audit.lock(tx)
                self.decisions.add(linked, tx)
                index = self._append(
                    linked,
                    "lease_granted",
                    "granted before its first decision; linked to it by this renewal",
                    0,
                    tx,
                )
            self._outcome_span(linked, "lease_granted", index)

    def _merge(self, lease_id: str, held: tuple[Reservation, ...]) -> bool:
        """Merge ``held`` into ``lease_id``'s decision (``_link``); False if it has none."""
        with self.gate.store.transaction() as tx:
            decided = self.decisions.get(lease_id, tx)
            if decided is None:
                return False
            kept = list(decided.reservations)
            for reservation, unit, amount in held:
                for i, (into, kept_unit, kept_amount) in enumerate(kept):
                    if kept_unit == unit and self.gate.ledger.merge(into, reservation, tx):
                        kept[i] = (into, unit, kept_amount + amount)
                        break
                else:  # taken from another chain (renewed under another grant): kept apart
                    kept.append((reservation, unit, amount))
            self.decisions.set_reservations(lease_id, kept, tx)
        return True

    def advance(self) -> list[BrokerEvent]:
        """Apply the clock (expiries, grace ends, timeouts, grants that follow); the events are audited."""
        with self._lock:
            self._record([])
            events = self.broker.advance()
            self._record(events)
        return events

    def reconcile(self) -> list[str]:
        """End the recorded decisions whose lease or request the broker does not have; their ids.

        For a restart whose broker lost leases (they were made after the journal's last write, or
        their end could not be recorded before the process stopped): call it once the broker is
        restored. Each is audited as ``lease_lost``. The time a lost lease was held is not known:
        one whose grant is in the log (a ``lease_granted`` outcome of its decision) may have held
        its GPUs until its expiry, so its reservations are charged whole; a request lost while it
        waited held nothing, and its reservations are returned. (Until review R42 every lost
        lease's reservations were returned: a lease whose end the store refused just before a
        restart was never charged for the time it held.)
        """
        with self._lock:
            self._record([])  # an end not recorded yet is settled at its time held, not as lost
            live = {lease.id for lease in self.broker.leases()} | {q.request.id for q in self.broker.queue()}
            lost = [d for d in self.decisions.all() if d.request_id not in live]
            for decided in lost:
                granted = decided.audit_index is not None and any(
                    entry.kind == "outcome" and entry.status == "lease_granted"
                    for entry in self.gate.audit.referring(decided.audit_index)
                )
                self._end(
                    decided.request_id,
                    decided.principal,
                    decided.resource,
                    "lease_lost",
                    "the broker no longer has this lease or request (lost in a restart); "
                    + (
                        "it was granted and may have been held until its expiry: reservation charged"
                        if granted
                        else "it never held GPUs: reservation returned"
                    ),
                    "reserved" if granted else None,
                )
        return [decided.request_id for decided in lost]

    def _call(self, resource: str, request: GangRequest, hold_s: float) -> Call:
        """The call a lease request is decided as: every setting that gives a lease power over
        others, and ``hold_s``, the GPU time (per GPU) this decision adds to the lease, which is
        what a priced GPU type reserves."""
        broker = self.broker
        return Call(
            resource,
            "lease",
            {
                "count": request.gpus,
                "priority": request.priority,
                "ttl_s": _number(self._ttl(request)),
                "grace_s": _number(broker.grace_s if request.grace_s is None else request.grace_s),
                "timeout_s": _number(request.timeout_s),
                "request": request.id,
                "hold_s": _number(hold_s),
            },
        )

    def _ttl(self, request: GangRequest) -> float:
        return self.broker.ttl_s if request.ttl_s is None else request.ttl_s

    def _extension(self, request: GangRequest, lease: Lease | None) -> float:
        """The time a renewal adds to ``lease``: from its end now to ``ttl_s`` from now, neither
        past its notice deadline; 0 for a request still waiting (the broker renews no such)."""
        if lease is None:
            return 0.0
        deadline = math.inf if lease.notice_deadline is None else lease.notice_deadline
        now = self.broker.clock()
        return max(0.0, min(now + self._ttl(request), deadline) - min(lease.expires_at, deadline))

    def _price(self, resource: str) -> int | None:
        spec = self.gate.policy.document.gpus.get(resource.removeprefix("gpu:"))
        return None if spec is None else spec.cost_per_gpu_hour

    def _live(self, request_id: str) -> bool:
        """Whether the broker holds ``request_id`` as a lease or a waiting request."""
        return any(lease.id == request_id for lease in self.broker.leases()) or any(
            q.request.id == request_id for q in self.broker.queue()
        )

    def _holder_request(self, identity: AgentIdentity, lease_id: str) -> GangRequest:
        """The request of ``identity``'s live lease or waiting request ``lease_id``."""
        found = {lease.id: lease.request for lease in self.broker.leases()}
        found.update((q.request.id, q.request) for q in self.broker.queue())
        request = found.get(lease_id)
        if request is None or request.holder != identity.did:
            # One answer for both: another holder's live id is none of the caller's business (a
            # different one would tell any identity which of another tenant's ids are live).
            raise LeaseLost(
                f"lease {lease_id!r} is not held by you (released, expired, preempted, or never yours)"
            )
        return request

    def _record(self, events: list[BrokerEvent]) -> None:
        """Audit ``events``, after those an earlier call could not record. An outcome that cannot
        be recorded (``StoreError``) raises, and it and the events after it stay unrecorded, to
        be recorded first at the next call (until review R40 they were lost: the lease's
        reservation stayed held and its allow had no end)."""
        self._unrecorded.extend(events)
        while self._unrecorded:
            self._record_one(self._unrecorded[0])
            del self._unrecorded[0]

    def _record_one(self, event: BrokerEvent) -> None:
        status, reason = _describe(event)
        if isinstance(event, LeaseEnded):
            lease = event.lease
            deadline = math.inf if lease.notice_deadline is None else lease.notice_deadline
            # When the broker ended it, not now: events a failed journal write held back
            # are recorded a call later.
            ended = self.broker.clock() if event.at is None else event.at
            end = min(ended, lease.expires_at, deadline)
            held = (len(lease.gpus), max(0.0, end - lease.granted_at))
            self._end(lease.id, lease.request.holder, _resource_or_any(lease.request), status, reason, held)
        elif isinstance(event, TimedOut | Withdrawn):
            request = event.request
            self._end(request.id, request.holder, _resource_or_any(request), status, reason)
        else:
            request = event.lease.request
            decided = self.decisions.get(request.id)
            if decided is None:  # queued around the gate
                decided = _unlinked(request.id, request.holder, _resource_or_any(request))
            self._outcome_span(decided, status, self._append(decided, status, reason, 0))

    def _refuse_taken(self, decided: LeaseDecision) -> NoReturn:
        """Return an allowed request's reservations and record its ``error`` outcome, its id being
        another holder's live one; raise ``BrokerError``. (That holder's decision is untouched.)"""
        reason = f"request {decided.request_id!r} is already live"
        self._abandon(decided, reason)
        raise BrokerError(reason)

    def _abandon(self, decided: LeaseDecision, reason: str) -> None:
        """Return the reservations of an allow the broker never saw and append its ``error``
        outcome, in one transaction; its decision's row, if it is this allow's, is forgotten."""
        with self.gate.store.transaction() as tx:
            self.gate.audit.lock(tx)
            recorded = self.decisions.get(decided.request_id, tx)
            if recorded is not None and recorded.audit_index == decided.audit_index:
                self.decisions.remove(decided.request_id, tx)  # written, though the store said not
            self._settle(tx, decided, None)
            index = self._append(decided, "error", reason, 0, tx)
        self._outcome_span(decided, "error", index)

    def _end(
        self,
        request_id: str,
        holder: str,
        resource: str,
        status: str,
        reason: str,
        held: Held = None,
    ) -> None:
        """The last outcome of a request: its budget settled (``held``: GPUs and seconds held;
        ``None``: nothing held, all returned; ``"reserved"``: all charged), its decision
        forgotten and the outcome appended, in one transaction; then the outcome's span."""
        with self.gate.store.transaction() as tx:
            self.gate.audit.lock(tx)  # before any row, as every Gate write (docs/operations.md)
            decided = self.decisions.get(request_id, tx)
            delta = 0
            if decided is not None:
                delta = self._settle(tx, decided, held)
                self.decisions.remove(request_id, tx)
            ended = decided or _unlinked(request_id, holder, resource)
            index = self._append(ended, status, reason, delta, tx)
        self._outcome_span(ended, status, index)

    def _settle(self, tx: Transaction, decided: LeaseDecision, held: Held) -> int:
        """Commit what the lease used of its reservations and return the rest; the amount committed
        in the unit of the first reservation (the caller's own budget's, see ``Gate._caps``).

        Each decision's call is spent once the lease was granted. Money: the GPUs times the held
        seconds (rounded up) at the lease's price, taken from its reservations in order. They
        cover the lease from its grant to its expiry, rounded up, which bounds the time held; the
        ``min`` keeps the charge within them for a clock that jumps.
        """
        if held is None:
            for reservation, _unit, _amount in decided.reservations:
                self.gate.ledger.release(reservation, tx)
            return 0
        reserved = {unit: sum(a for _, u, a in decided.reservations if u == unit) for unit in _MONEY}
        if held == "reserved":
            owed = reserved
        else:
            gpus, seconds = held
            price = decided.cost_per_gpu_hour
            cost = 0 if price is None else lease_cost(gpus, seconds, price)
            owed = {unit: min(cost, reserved[unit]) for unit in _MONEY}
        committed = 0
        primary = decided.reservations[0][1] if decided.reservations else None  # the caller's own unit
        for reservation, unit, amount in decided.reservations:
            used = min(amount, owed[unit]) if unit in owed else amount
            if unit in owed:
                owed[unit] -= used
            self.gate.ledger.commit(reservation, used, tx)
            if unit == primary:  # an audit entry's budget_delta is in one unit, never a sum of several
                committed += used
        return committed

    def _append(
        self, decided: LeaseDecision, status: str, reason: str, delta: int, tx: Transaction | None = None
    ) -> int:
        """Append the lease's ``outcome`` entry (in ``tx``, else committed on its own); its index.
        Its span (``_outcome_span``) is the caller's to make once the entry is committed."""
        return self.gate.audit.append(
            {
                "kind": "outcome",
                "principal": decided.principal,
                "chain_hash": decided.chain_hash or None,
                "resource": decided.resource,
                "status": status,
                "ref": decided.audit_index,
                "budget_delta": delta,
                "reasons": [reason],
            },
            tx,
        )

    def _outcome_span(self, decided: LeaseDecision, status: str, index: int) -> None:
        """The span of the lease's committed ``outcome`` entry at ``index``: ``{status}
        {resource}`` (``lease_outcome_span``), one per entry, as every decision has its own
        (until review R54 a lease's outcomes had none)."""
        with lease_outcome_span(
            decided.resource,
            status,
            lease_id=decided.request_id,
            audit_index=index,
            ref=decided.audit_index,
            tracer=self.gate.tracer,
        ):
            pass


def _outlived(identity: AgentIdentity, ttl_s: float) -> str | None:
    """Why a lease running ``ttl_s`` from now would outlive ``identity``'s grant chain (the
    chain's earliest expiry), or ``None`` when it would not. A lease never does: the renewals,
    which check the authority again, must come before the grant is gone."""
    left = identity.chain.expires - time.time()
    if ttl_s <= left:
        return None
    return (
        f"a ttl_s of {ttl_s:g} s would outlive the grant, which expires in {max(0.0, left):.0f} s; "
        "a lease never outlives the grant that decided it"
    )


def _wait_left(identity: AgentIdentity, ttl_s: float) -> float:
    """How long a request may wait in the queue: a lease granted later than this would outlive
    ``identity``'s grant chain (``_outlived`` checks the lease as if granted at once)."""
    return max(0.0, identity.chain.expires - time.time() - ttl_s)


def _held(auth: Authorization) -> tuple[Reservation, ...]:
    return tuple((reservation, unit, amount) for reservation, unit, amount in auth.reservations)


def _unlinked(request_id: str, holder: str, resource: str) -> LeaseDecision:
    """A request with no recorded decision (queued on the broker directly): audited without ``ref``."""
    return LeaseDecision(request_id, holder or "unknown", "", resource, None, None)


def _resource(request: GangRequest) -> str:
    if not request.gpu_type:
        raise BrokerError(f"request {request.id!r}: name its gpu_type: grants cover gpu:TYPE, e.g. gpu:h100")
    try:
        return canonical_resource(f"gpu:{request.gpu_type.lower()}")
    except CapabilityError as exc:
        raise BrokerError(
            f"request {request.id!r}: gpu_type {request.gpu_type!r} is no resource name: {exc}"
        ) from exc


def _number(seconds: float) -> int | float:
    """A time as the decision sees it: an integer when it is one (``600``, not ``600.0``), since
    the capability algebra compares numbers exactly; infinite times are refused by ``GangRequest``."""
    return int(seconds) if float(seconds).is_integer() else float(seconds)


def _resource_or_any(request: GangRequest) -> str:
    try:
        return _resource(request)
    except BrokerError:
        return "gpu:*"


def _describe(event: BrokerEvent) -> tuple[str, str]:
    """The outcome status and the one-line reason an event is audited with."""
    if isinstance(event, Granted):
        lease = event.lease
        where = f" inside one {lease.level}" if lease.level else ""
        return "lease_granted", f"granted {len(lease.gpus)} GPUs{where}: {', '.join(lease.gpus)}"
    if isinstance(event, CheckpointNotice):
        return (
            "lease_preempt_notice",
            f"preempted ({event.reason}) by {event.preemptor}: checkpoint and release before {event.deadline:.3f}",
        )
    if isinstance(event, LeaseEnded):
        return f"lease_{event.reason}", f"lease ended ({event.reason}); {len(event.lease.gpus)} GPUs returned"
    if isinstance(event, Withdrawn):
        return "request_withdrawn", "withdrawn by its holder while it waited; held nothing"
    return "lease_timed_out", f"waited {event.request.timeout_s:g} s without being placed whole; held nothing"
