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
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

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
)
from agentgate.errors import BrokerError, CapabilityError, Denied, LeaseLost
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate


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


@dataclass(frozen=True)
class _Decided:
    principal: str
    chain_hash: str
    resource: str
    audit_index: int | None


class GatedBroker:
    """``broker`` behind ``gate``: decide, audit, then queue; audit every change of the lease."""

    def __init__(self, gate: Gate, broker: Broker) -> None:
        self.gate = gate
        self.broker = broker
        self._decided: dict[str, _Decided] = {}
        self._claimed: set[str] = set()  # ids being decided right now
        self._lock = threading.Lock()

    def submit(
        self, identity: AgentIdentity | None, request: GangRequest, *, approval: Approval | None = None
    ) -> GatedRequest:
        """Decide ``request`` for ``identity``; if allowed, queue it with the policy's tenant and the DID.

        Behind an approval gate of the policy the answer is ``needs_approval`` (nothing queued;
        ``authorization.approval_payload()`` is what an approver signs, e.g. with ``agentgate
        approval sign``); the same request submitted again with the signed ``approval`` is decided
        with it, once. Never raises for a refused request (the refusal is audited and returned). Raises
        ``BrokerError`` for a request without ``gpu_type`` (a grant covers ``gpu:TYPE``, so the
        type must be known before the decision), a type that is no resource name, or an id that
        is already live through this ``GatedBroker`` (before any decision); and, after an allowed
        decision, whatever ``Broker.submit`` raises (an unknown tenant, a duplicate id, a gang
        that could never be placed), with an ``error`` outcome appended first.
        """
        resource = _resource(request)
        with self._lock:
            if request.id in self._decided or request.id in self._claimed:
                raise BrokerError(f"request {request.id!r} is already live")
            self._claimed.add(request.id)
        try:
            call = self._call(resource, request)
            auth = self.gate.authorize(identity, call, approval=approval, call_id=request.id)
            if not auth.allowed:
                return GatedRequest(auth)
            assert identity is not None
            decided = _Decided(identity.did, identity.grant_id, resource, auth.audit_index)
            owned = dataclasses.replace(request, tenant=self.gate.tenant_of(identity), holder=identity.did)
            with self._lock:
                self._decided[request.id] = decided
            try:
                events = self.broker.submit(owned)
            except Exception as exc:
                with self._lock:
                    self._decided.pop(request.id, None)
                self._append(decided, "error", str(exc) or type(exc).__name__)
                raise
        finally:
            with self._lock:
                self._claimed.discard(request.id)
        self._record(events)
        return GatedRequest(auth, tuple(events))

    def release(self, identity: AgentIdentity, lease_id: str) -> list[BrokerEvent]:
        """End ``identity``'s lease (or withdraw its waiting request); the events are audited.

        Raises ``Denied`` when the lease or request is another holder's, ``LeaseLost`` when it is
        not live. Releasing needs no decision: giving GPUs back is always allowed.
        """
        self._holder_request(identity, lease_id)
        events = self.broker.release(lease_id)
        self._record(events)
        return events

    def renew(self, identity: AgentIdentity, lease_id: str) -> Lease:
        """Extend ``identity``'s live lease, decided again like the request (audited).

        Raises ``Denied`` when the lease is another holder's or the renewal is refused (the grant
        was revoked or has expired, or no longer covers the lease), ``LeaseLost`` when it is not
        live.
        """
        request = self._holder_request(identity, lease_id)
        auth = self.gate.authorize(identity, self._call(_resource_or_any(request), request))
        # A lease behind an approval gate was approved when it was granted: its renewals are not
        # asked again (an approval is for one call); what a renewal checks is the authority.
        if not (auth.allowed or auth.needs_approval):
            raise Denied(f"renewal of lease {lease_id!r} refused: {auth.explain()}", auth.decision)
        return self.broker.renew(lease_id)

    def _call(self, resource: str, request: GangRequest) -> Call:
        """The call a lease request is decided as: every setting that gives a lease power over others."""
        broker = self.broker
        return Call(
            resource,
            "lease",
            {
                "count": request.gpus,
                "priority": request.priority,
                "ttl_s": _number(broker.ttl_s if request.ttl_s is None else request.ttl_s),
                "grace_s": _number(broker.grace_s if request.grace_s is None else request.grace_s),
                "timeout_s": _number(request.timeout_s),
                "request": request.id,
            },
        )

    def advance(self) -> list[BrokerEvent]:
        """Apply the clock (expiries, grace ends, timeouts, grants that follow); the events are audited."""
        events = self.broker.advance()
        self._record(events)
        return events

    def _holder_request(self, identity: AgentIdentity, lease_id: str) -> GangRequest:
        """The request of ``identity``'s live lease or waiting request ``lease_id``."""
        found = {lease.id: lease.request for lease in self.broker.leases()}
        found.update((q.request.id, q.request) for q in self.broker.queue())
        request = found.get(lease_id)
        if request is None:
            raise LeaseLost(f"lease {lease_id!r} is not held (released, expired or preempted)")
        if request.holder != identity.did:
            raise Denied(f"lease {lease_id!r} is held by another principal; only its holder may change it")
        return request

    def _record(self, events: list[BrokerEvent]) -> None:
        for event in events:
            request = event.request if isinstance(event, TimedOut) else event.lease.request
            with self._lock:
                decided = self._decided.get(request.id)
                if isinstance(event, LeaseEnded | TimedOut):
                    self._decided.pop(request.id, None)
            if decided is None:  # queued around the gate, or before this process started
                decided = _Decided(request.holder or "unknown", "", _resource_or_any(request), None)
            status, reason = _describe(event)
            self._append(decided, status, reason)

    def _append(self, decided: _Decided, status: str, reason: str) -> None:
        self.gate.audit.append(
            {
                "kind": "outcome",
                "principal": decided.principal,
                "chain_hash": decided.chain_hash or None,
                "resource": decided.resource,
                "status": status,
                "ref": decided.audit_index,
                "budget_delta": 0,
                "reasons": [reason],
            }
        )


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
    return "lease_timed_out", f"waited {event.request.timeout_s:g} s without being placed whole; held nothing"
