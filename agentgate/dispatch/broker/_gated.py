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
grant cannot keep its GPUs); a request still waiting when its grant is revoked is withdrawn as it
is about to take GPUs (``Broker.grant_check``, ``GatedBroker._revoked_grant``). What happens to
a lease afterwards (granted, notified of preemption, ended, timed out, withdrawn) is appended to
the log as an ``outcome`` entry that refers to the decision.

The link from a lease to its decision lives in the store (``store/broker_decisions.py``), not in
the process: a ``GatedBroker`` started after a restart, over the same store and a broker restored
from its journal, audits the leases decided before the restart against their own decisions and
settles their budgets. GPU time costs what the policy says (``gpus: {TYPE: {cost_per_gpu_hour:
...}}``): the decision of a request reserves ``count`` x ``ttl_s`` at that price, a renewal the
time it adds, and the lease's end settles the time actually held, rounded up to the second, and
returns the rest.

The outcomes and the settlements are ``_lease_outcomes.py`` (``_Recording``, a part of
``GatedBroker``); how a request is put to the Gate (its resource, its times, the time its grant
chain leaves it) is ``_lease_calls.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from agentgate.capabilities import Call
from agentgate.dispatch.broker._broker import Broker, _an_id
from agentgate.dispatch.broker._lease_calls import (
    _number,
    _outlived,
    _resource,
    _resource_or_any,
    _revoked_link,
    _wait_left,
)
from agentgate.dispatch.broker._lease_outcomes import _held, _Recording
from agentgate.dispatch.broker._model import (
    BrokerEvent,
    CheckpointNotice,
    GangRequest,
    Granted,
    Lease,
    LeaseEnded,
)
from agentgate.dispatch.broker._quoting import quoted
from agentgate.errors import (
    AuditError,
    BrokerError,
    Denied,
    LeaseLost,
    NotRenewed,
    NotWriter,
    StoreError,
    TamperDetected,
)
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.gate._authorization import expect
from agentgate.gate._checks import _IDENTITY, _IDENTITY_OR_NONE
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision

_log = logging.getLogger("agentgate.broker")


@dataclass(frozen=True)
class GatedRequest:
    """The answer to one gated request: the decision, and what the broker did if it was allowed."""

    authorization: Authorization
    """The Gate's decision, already in the audit log (``authorization.audit_index``)."""
    events: tuple[BrokerEvent, ...] = ()
    """What the broker did in that call (a grant of this request, notices to its victims, the end
    of an earlier request with its id...), after what it did in earlier calls that returned no
    events (a refused submit, a renewal: ``GatedBroker._delivered``); empty when the request was
    refused (those come out of the next call that returns events)."""

    @property
    def allowed(self) -> bool:
        return self.authorization.allowed

    @property
    def needs_approval(self) -> bool:
        """Whether a human approval is asked for (``authorization.approval_payload()``)."""
        return self.authorization.needs_approval

    def lease(self) -> Lease | None:
        """This request's lease if the broker granted it at once; ``None`` if it waits or was refused.

        A ``Granted`` with the id that no ``LeaseEnded`` of it follows: ``events`` may start with
        those of earlier calls, the grant and end of an earlier request with the same id among
        them (until a regression review, round c, of R87 that expired lease was returned, whether
        this request was granted or waits)."""
        own = self.authorization.call.args.get("request")
        lease: Lease | None = None
        for event in self.events:
            if isinstance(event, Granted) and event.lease.id == own:
                lease = event.lease
            elif isinstance(event, LeaseEnded) and event.lease.id == own:
                lease = None
        return lease


class GatedBroker(_Recording):
    """``broker`` behind ``gate``: decide, audit, then queue; audit every change of the lease.

    ``name`` is the broker's name in the store, the same as its journal's
    (``BrokerLeaseStore(store, broker=name)``). Calls are serialized: each one decides through the
    Gate, whose decisions run one at a time anyway. It sets ``broker.grant_check``
    (``_revoked_grant``): one ``GatedBroker`` per broker. Raises ``BrokerError`` for a ``broker``
    another ``GatedBroker`` holds already (its ``grant_check``): until review R93 the second
    took the check over, found no decision of the first's requests in its store, and let a waiting
    request of a revoked grant take GPUs; and each took the other's events.
    """

    def __init__(self, gate: Gate, broker: Broker, *, name: str = "default") -> None:
        holder = getattr(broker.grant_check, "__self__", None)
        if isinstance(holder, GatedBroker):
            raise BrokerError(
                f"the broker is behind a GatedBroker already (name {holder.decisions.broker!r}): "
                f"a second one (name {name!r}) would take its grant_check and its events over; "
                "one GatedBroker per broker"
            )
        self.gate = gate
        self.broker = broker
        self.decisions = BrokerDecisionStore(gate.store, name)
        self._lock = threading.RLock()
        self._unrecorded: deque[BrokerEvent] = deque()
        """Events the broker gave out (``_take``) whose outcome is not recorded yet (the
        store failed, or an interrupt came first): recorded first at the next call, in order (a
        deque: each is taken from the front, which a list did in time growing with the backlog
        behind it)."""
        self._undelivered: list[BrokerEvent] = []
        """Events recorded that no call has returned yet (``_delivered``)."""
        self._commit_unknown: tuple[BrokerEvent, tuple[LeaseDecision, str, int]] | None = None
        """The first of ``_unrecorded`` whose outcome's transaction ended unknown (an interrupt,
        ``CommitUnknown``) and was not found in the log then, with where it was written
        (``_logged``): looked for again before it is written again (``_record``)."""
        self._unlinked: deque[Callable[[], None]] = deque()
        """Links of renewals the broker made whose write failed (``_link_kept``): written first at
        the next call (``_record``), so before their lease's end is settled."""
        broker.grant_check = self._revoked_grant

    def _revoked_grant(self, request: GangRequest) -> str | None:
        """``Broker.grant_check``: why ``request``, decided through this ``GatedBroker``, may no
        longer take GPUs, a grant of the chain that decided it being revoked, or ``None``.

        Asked by the broker as a waiting request is about to be granted (or to preempt, or to
        reserve a group to drain), whatever call or clock brings that about, so a revocation made
        by any process on the store, the CLI's or one made while the broker was down, holds: not
        at ``Gate.revoke``, which no other process's revocation passes through, and not at every
        call for every request waiting. Two or three reads of the store per grant: the decision's
        row (a request queued on the broker directly has none: ``None``) and the links of its
        chain (``_revoked_link``). A ``StoreError`` leaves the request waiting (``Broker``)."""
        decided = self.decisions.get(request.id)
        if decided is None or not decided.chain_hash:
            return None
        revoked = _revoked_link(self.gate.store, decided.chain_hash)
        if revoked is None:
            return None
        return f"grant {revoked} of the chain that decided it was revoked while it waited"

    def submit(
        self, identity: AgentIdentity | None, request: GangRequest, *, approval: Approval | None = None
    ) -> GatedRequest:
        """Decide ``request`` for ``identity``; if allowed, queue it with the policy's tenant and the DID.

        Behind an approval gate of the policy the answer is ``needs_approval`` (nothing queued;
        ``authorization.approval_payload()`` is what an approver signs, e.g. with ``agentgate
        approval sign``); the same request submitted again with the signed ``approval`` is decided
        with it, once. A GPU type the policy prices has ``count`` x ``ttl_s`` reserved from the
        chain's budgets with the decision; a budget too small for it refuses the request, naming
        the budget. The request waits in the queue no longer than the time the grant chain has
        left less ``ttl_s`` (``Broker.submit``'s ``wait_s``; it keeps its ``timeout_s``, which its
        renewals are decided with again): one that waits longer times out rather than be granted
        a lease that would outlive the chain. Never raises for a refused request (the refusal is
        audited and returned).
        The id of a request the clock ended since the broker's last call (a lease expired, a wait
        run out), or that a broker call ended before it raised (its end not given out yet,
        ``Broker.undelivered``: a request queued on the broker directly and released as its
        journal failed), is free: that request's end is audited against its own decision before the new
        request is decided (``Broker.end_due``), and is in the answer's ``events`` if it is allowed,
        else in those of the next call that returns events. While the broker's journal fails that
        end cannot be given out, and an allowed request with the id is refused with
        ``StoreError`` (whether or not the earlier request had a decision), its allow closed with an ``error`` outcome and its reservation returned;
        so is one whose id has a decision but no request at the broker (``BrokerError``: lost in
        a restart, which ``reconcile`` ends), see ``_refuse_earlier``.
        Raises ``BrokerError`` for a request without ``gpu_type`` (a grant covers ``gpu:TYPE``, so
        the type must be known before the decision), a type that is no resource name, an id of the
        caller's own request that is live through a ``GatedBroker`` of this name (live at the
        broker's clock, ``Broker.is_live``), or a ``ttl_s`` that would outlive the identity's grant
        chain, before any decision; a ``StoreError`` recording an earlier call's events raises
        before any decision too (those events are recorded first, see ``_record``).

        An allowed request is settled by one rule, whatever is raised (an error, or an interrupt:
        a Ctrl-C's ``KeyboardInterrupt``, a signal handler's ``SystemExit``). Until the broker took
        the request, its allow is closed with an ``error`` outcome, its reservation returned and
        its row forgotten, before the error is raised as is. Once the broker took it, the request
        stands, linked to its decision with its reservation held, and its events, kept with this
        ``GatedBroker`` as soon as the broker gives them out, come out of the next call. The broker
        took it once ``Broker.submit`` returned, an interrupt after that (at the release of the
        broker's lock) included, or, where ``Broker.submit`` raised (its journal's ``StoreError``,
        its pass over the queue raising: the placement policy, ``grant_check``; an interrupt),
        when it holds this very request or ended it in that call (``_took``: withdrawn by
        ``grant_check``, its event closes the decision at the next call), whatever was raised,
        unless it raised ``NotWriter`` (another broker process took the name over: this broker
        is no authority, and nothing it took stands).
        (Until a regression review (d) of R91 an interrupt at that release closed the allow of a
        request the broker had granted, its lease run unlinked, never charged, and its events
        never audited.) Raised before the broker took it: ``BrokerError`` for an id another
        holder's live request has, or one queued on the ``Broker`` directly (live when checked
        before the decision, or queued since, up to the broker's taking the request: one ended
        while the Gate decides or the decision's link is written, by the clock or by a broker
        call that raised after ending it, is refused all the same, never ended against the new
        decision), told only after the decision so that a
        caller the policy refuses cannot tell another tenant's ids from free ones; whatever
        ``Broker.submit`` raises refusing it (an unknown tenant, a duplicate id, a gang that could
        never be placed); the store's error recording the decision's link; and any interrupt from
        the allow's commit on (its span, a wait for the broker's lock). An interrupt is raised
        even where the store refuses that clean-up (its error logged and chained, ``_closed``).
        Raises ``InputError``, as ``Gate.authorize`` does, for an ``identity`` that is neither an
        ``AgentIdentity`` nor ``None``, before anything is written (until a regression review of
        R85 a DID or a name given as text was an ``AttributeError`` from reading its ``did``).
        """
        expect(identity, _IDENTITY_OR_NONE, "identity", _IDENTITY + " or None")
        resource = _resource(request)
        with self._lock:
            self._record()  # what an earlier call could not record comes first
            earlier = self.decisions.get(request.id)
            live = self.broker.is_live(request.id)  # asked without moving the broker
            unjournaled = None
            if not live and (
                earlier is not None or self.broker.holds(request.id) or self._end_in_broker(request.id)
            ):
                # The earlier request with this id, which the clock ended since the broker's last
                # call (a lease expired, a wait run out), is ended and its end audited against its
                # own decision before the new request is decided, as a call of the broker ends it
                # first. Only for an id that has a decision or that the broker holds: a fresh id,
                # the usual case, leaves the broker untouched until its request is allowed. The
                # broker ends what is due without trying the queue (``Broker.end_due``):
                # ``Broker.submit`` then ranks the new request among those waiting as a submit
                # alone ranks it, and a request the policy refuses tries no placement; the events
                # come out of the next call that returns events, this submit if it is allowed
                # (``_delivered``). (Until a regression review of R87 every submit applied the
                # clock and tried the queue first, refused ones too, its events returned by no
                # call, and a request submitted as a lease expired ranked below those waiting.)
                # A journal that fails leaves the end in the broker, unrecorded, and an allowed
                # request is refused with its error (``_refuse_earlier``). So for an id whose end
                # the broker has not given out yet (``_end_in_broker``): until a regression review
                # (c) of R91 a request queued on the broker directly and ended in a call that
                # raised was skipped, and its end, given out by ``Broker.submit``, closed the new
                # decision, whose lease ran unlinked, never charged.
                unjournaled = self._applied(self.broker.end_due)
                earlier = self.decisions.get(request.id)
            if live and earlier is not None and identity is not None and earlier.principal == identity.did:
                raise BrokerError(f"request {quoted(request.id)} is already live")
            if identity is not None and (left := _outlived(identity, self._ttl(request))) is not None:
                raise BrokerError(f"request {quoted(request.id)}: {left}")
            call = self._call(resource, request, self._ttl(request))
            auth = self.gate.authorize(identity, call, approval=approval, call_id=request.id)
            if not auth.allowed:
                return GatedRequest(auth)  # what the clock ended meanwhile comes out of the next call
            assert identity is not None
            decided = LeaseDecision(
                request.id,
                identity.did,
                identity.grant_id,
                resource,
                auth.audit_index,
                self._price(resource),
                _held(auth),
            )
            try:
                self.gate.trace_allowed(auth)  # the refusal's span is the Gate's; the allow's is made here
                # Waits for the broker's lock, which a call of another thread holds through a
                # journal write that may hang: where a Ctrl-C lands.
                taken = live or self.broker.holds(request.id)
            except BaseException as exc:  # an interrupt too (Ctrl-C, a signal handler's exit)
                # The allow is committed (``Gate.authorize``), its link not written yet: closed with
                # an ``error`` outcome, its reservation returned, as after a failed link. Until a
                # regression review (b) of R91 this window was in no handler: the allow kept no
                # outcome and its reservation was held for ever.
                reason = _reason(exc)
                _closed(exc, lambda: self._abandon(decided, reason))
            # Said only once the policy allowed the caller, so that a caller it refuses cannot tell
            # another holder's ids from free ones. An end that could not be journaled refuses the
            # request whether or not the earlier request had a decision: one queued on the broker
            # directly has none, and until a regression review (round c) of R87 its end was then
            # recorded against the new decision once the journal wrote again. So does an id live
            # at the broker before the decision, or queued there since, decided here or not: one
            # queued directly that the clock ended while the Gate decided (a store commit) was
            # ended by ``Broker.submit`` first, and until review R88 that end was recorded against
            # the new decision, settling it and leaving the new lease unlinked, never charged.
            if taken or earlier is not None or unjournaled is not None:
                self._refuse_earlier(decided, taken, unjournaled)
            # Written right after the decision's transaction, which Gate.authorize commits on its
            # own, and before the broker sees the request: no lease exists without its link. A
            # crash between the two leaves the reservation held (a budget can look smaller,
            # never be overspent) and no lease.
            try:
                added = self.decisions.add(decided)
            except BaseException as exc:  # an interrupt too (Ctrl-C, a signal handler's exit)
                # The allow is committed, the broker never sees the request: its reservation is
                # returned and the allow closed with an ``error`` outcome (until review R40 it
                # stayed held with no outcome, and until review R91 so it did for an interrupt),
                # the row forgotten if it was written. If the store fails for that too, the
                # reservation stays held: a budget can look smaller, never be overspent; an
                # interrupt is raised all the same (``_closed``).
                reason = f"the lease's decision could not be recorded: {_reason(exc)}"
                _closed(exc, lambda: self._abandon(decided, reason))
            if not added:  # a decision written meanwhile has the id: this one would be linked to none
                self._refuse_taken(decided)
            # The request keeps the timeout_s it was decided with, so that its renewals decide
            # the same arguments; only its wait in the queue is cut to the grant's time left.
            # Until review R87 its timeout_s was cut, and a policy bounding timeout_s from below
            # (``in: [600, 3600]``) refused every renewal of a lease it had allowed.
            # Everything from the link's commit to ``Broker.submit`` is in one handler: an
            # interrupt landing between the two (until a regression review of R91 it left the
            # row and the reservation held, the id refused as "lost in a restart") closes the
            # allow as one in ``Broker.submit`` before the broker took the request does.
            acted = False  # whether the broker took the request: the rule of the docstring
            try:
                owned = dataclasses.replace(
                    request, tenant=self.gate.tenant_of(identity), holder=identity.did
                )
                wait_s = _wait_left(identity, self._ttl(request))
                # The broker's lock is taken here, around ``Broker.submit`` and the reading of
                # what it did, as ``renew`` takes it: an interrupt in the wait for it (another
                # thread in a journal write that hangs) comes before the broker took anything,
                # and nothing after it waits for the lock again.
                with self.broker._lock:
                    # Asked again with no store write between the question and ``Broker.submit``:
                    # an id queued on the broker directly while the link above was committed,
                    # ended since by the clock or by a call that raised after it (its end not
                    # given out yet), would have that end given out by ``Broker.submit`` and
                    # recorded against this decision (until a regression review (d) of R91 the
                    # latter was not asked here).
                    queued_directly = self.broker.holds(request.id) or self._end_in_broker(request.id)
                    try:
                        if not queued_directly:
                            # Its events are kept before the broker releases its lock (``_take``),
                            # and an interrupt after it returned (at a release of the lock, where
                            # CPython handles a pending signal) finds the request taken (``_took``).
                            self._take(functools.partial(self.broker.submit, owned, wait_s=wait_s))
                            acted = True
                    except BaseException as failed:
                        # A broker whose journal is not its name's writer is no authority: what
                        # it took stands nowhere, and its allow is closed (until review R96 it
                        # stayed open, linked to a request the writing broker never had).
                        acted = not isinstance(failed, NotWriter) and self._took(owned)
                        raise
            except BaseException as exc:  # an interrupt too (Ctrl-C, a signal handler's exit)
                if acted:
                    raise  # the request stands, linked; its events come out of the next call
                reason = _reason(exc)
                _closed(exc, lambda: self._end(request.id, decided.principal, resource, "error", reason))
            if queued_directly:
                self._refuse_taken(decided)  # the row just added is this allow's: forgotten
            self._record()
            return GatedRequest(auth, tuple(self._delivered()))

    def _took(self, request: GangRequest) -> bool:
        """Whether the broker took ``request`` itself once ``Broker.submit`` raised, or an interrupt
        came as it returned: it holds it, as a lease or waiting, or it ended it in that very call
        (``grant_check`` withdrew it in the pass), its event not given out yet
        (``Broker.undelivered``) or given out and not recorded yet (``_unrecorded``): that event,
        recorded at the next call, closes this decision, so its row must stay. Until a regression review (b) of
        R91 such a request counted as never taken: its allow was closed as an ``error`` and its
        row deleted, and its event then closed the next decision of the id, whose lease ran
        unlinked, never charged. Not merely its id, which a request queued on the ``Broker``
        directly may have taken since it was checked (``Broker.submit`` then refused this one
        as a duplicate). The broker keeps the request it was given, in a lease granted from it
        and in its events, so it is told by identity. Asked with the broker's lock held since
        before ``Broker.submit`` (``submit``)."""
        if self.broker.holds(request.id) and (
            any(lease.request is request for lease in self.broker.leases())
            or any(waiting.request is request for waiting in self.broker.queue())
        ):
            return True
        return any(_subject(event) is request for event in [*self.broker.undelivered(), *self._unrecorded])

    def _end_in_broker(self, request_id: str) -> bool:
        """Whether the broker has an event of a request ``request_id`` that no call has given out
        yet (``Broker.undelivered``): one ended in a call that raised after it (a journal write
        that failed), the broker holding it no more. Its end, recorded before a new request with
        the id is linked to its decision, closes that request's own decision, or none."""
        return any(_subject(event).id == request_id for event in self.broker.undelivered())

    def _refuse_earlier(
        self, decided: LeaseDecision, taken: bool, unjournaled: StoreError | None
    ) -> NoReturn:
        """Refuse allowed ``decided``, whose id still has an earlier decision or an earlier
        request at the broker, its reservation returned and an ``error`` outcome appended: the id
        is live at the broker, another holder's or queued on the broker directly (``BrokerError``,
        ``taken``: live when it was checked before the decision, or held since); the earlier
        request's end could not be journaled (``StoreError``, decided or not: were the new
        decision linked to the id, that end would be recorded against it once the journal
        writes); or the broker holds no such
        request (``BrokerError``: lost in a restart, ``reconcile`` ends its decision)."""
        request_id = decided.request_id
        if taken:
            self._refuse_taken(decided)
        if unjournaled is not None:
            reason = (
                f"request {quoted(request_id)}: the end of the earlier request with this id could not be "
                f"journaled ({unjournaled}); submit it again once the journal writes"
            )
            self._abandon(decided, reason)
            raise StoreError(reason) from unjournaled
        reason = (
            f"request {quoted(request_id)} still has the decision of a request the broker does not hold "
            "(lost in a restart): GatedBroker.reconcile() ends it"
        )
        self._abandon(decided, reason)
        raise BrokerError(reason)

    def release(self, identity: AgentIdentity, lease_id: str) -> list[BrokerEvent]:
        """End ``identity``'s lease (or withdraw its waiting request); the events are audited.

        The lease's budget is settled at the time it was held. Raises ``LeaseLost`` when the
        lease or request is not live, or is another holder's (one answer for both: another
        tenant's live ids are not told), an ``identity`` of ``None`` holding none. Releasing
        needs no decision: giving GPUs back is always allowed.
        """
        with self._lock:
            self._record()
            self._holder_request(identity, lease_id)
            self._take(functools.partial(self.broker.release, lease_id))
            self._record()
            return self._delivered()

    def renew(self, identity: AgentIdentity, lease_id: str) -> Lease:
        """Extend ``identity``'s live lease, decided again like the request (audited).

        The renewal reserves the time it adds to the lease (from its current expiry, or notice
        deadline, to ``ttl_s`` from now) at the policy's price. Raises ``Denied`` when the
        renewal is refused (the grant was revoked or has expired, no longer covers the lease,
        expires before ``ttl_s`` from now, or its budget cannot pay for the extension),
        ``LeaseLost`` when it is not live or is another holder's, an ``identity`` of ``None``
        holding none (nothing is decided or reserved then), or when the broker's journal is not
        its name's writer (``NotWriter`` the cause: another broker process took the name over and
        ends the lease at its old expiry; the renewal's allow is closed), ``NotRenewed`` when the store or
        the audit log fails before the broker renews (it cannot record the renewal's decision,
        the outcomes an earlier call left unrecorded, or those of the clock applied first, a
        grant included: the lease still ends when it did, renew it again), ``TamperDetected``
        as is when the audit log does not verify as the renewal is decided (not renewed either;
        a lease that ended meanwhile is ``LeaseLost`` whatever the log does, its cause the
        log's error), and
        ``StoreError`` only once the broker renewed the lease (its journal write or the
        renewal's link to the lease failed: the lease is renewed all the same, and its extension
        reserved; a failed link is kept and written at the next call).

        An allowed renewal is settled by one rule, whatever is raised (an error, or an interrupt:
        a Ctrl-C's ``KeyboardInterrupt``, a signal handler's ``SystemExit``). Until the broker
        renewed the lease, its allow is closed with an ``error`` outcome and its reservation
        returned, as for ``LeaseLost``, before the error is raised as is. Once it renewed it, the
        extension's reservation is linked to the lease, settled at its end: the link is written
        before the error is raised or, where the store fails it, kept with this ``GatedBroker``
        and written first at its next call, before any lease's end is settled (``_link_kept``;
        until review R93 it was dropped, the extension never charged and its reservation held for
        ever). A process that stops before that write leaves the extension's reservation held, tied
        to no decision (``reconcile`` does not see it), and the lease charged at most its earlier
        reservations: settle it by hand (``agentgate budget settle``). The broker renewed the
        lease once ``Broker.renew`` returned, an interrupt after that (at the release of the
        broker's lock, or in the link itself, which is written again) included, or, where
        ``Broker.renew`` raised (its journal's ``StoreError``, its pass over the queue raising, an
        interrupt), when it replaced the lease in that call (``_extended``), whatever was raised. (Until a regression review (d) of R91 an interrupt at
        that release closed the allow of a lease that ran the extension, charged no more than
        before it.) An interrupt in the closing of a ``LeaseLost`` renewal's allow closes it
        again, unless it committed first; an interrupt is raised even where the store refuses
        that clean-up (``_closed``).
        """
        with self._lock:
            try:
                resource, auth, decided = self._renewal_decided(identity, lease_id)
            except TamperDetected:
                # A log that does not verify is no failure to record, to renew past by retrying:
                # it is told as itself (until review R88c it was ``NotRenewed``, "the store could
                # not record its renewal").
                raise
            except (StoreError, AuditError) as exc:
                # Until review R88 this was the store's error as is, which ``renew`` documents
                # as renewed: a holder that went on working lost its GPUs at the old expiry. An
                # outcome appended on its own (a grant the renewal's advance made, or the backlog's)
                # that the log refuses is an ``AuditError``, named as the audit log's refusal.
                failed = "the store" if isinstance(exc, StoreError) else "the audit log"
                raise NotRenewed(
                    f"lease {quoted(lease_id)} was not renewed and still ends when it did: {failed} "
                    f"could not record its renewal ({exc}); renew it again before it ends"
                ) from exc
            held = _held(auth)
            link = functools.partial(self._link, identity, lease_id, resource, auth, held)
            # The renewal's allow as it is closed if the broker does not renew the lease
            # (``LeaseLost``, or raised before it renewed it): its reservation returned.
            renewal = LeaseDecision(
                lease_id, identity.did, identity.grant_id, resource, auth.audit_index, None, held
            )
            acted = False  # whether the broker renewed the lease: the rule of the docstring
            try:
                self.gate.trace_allowed(auth)
                # The broker's lock is taken here, around ``Broker.renew`` and the reading of what
                # it did: an interrupt in the wait for it (another thread in a journal write that
                # hangs) comes before the broker renewed anything, and nothing after it waits for
                # the lock again.
                with self.broker._lock:
                    earlier_events = len(self.broker.undelivered())
                    try:
                        renewed = self.broker.renew(lease_id)
                        acted = True  # an interrupt from here on (the lock's release) links it
                    except BaseException:
                        acted = self._extended(decided, earlier_events)
                        raise
            except LeaseLost as lost:
                # The lease ended while the renewal was decided (its expiry or grace end fell
                # between the two reads of the clock): the allow is settled as an ``error``
                # outcome, its reservation returned, in one transaction. A store that refuses it
                # leaves the allow open, its reservation held (settled by hand), and the caller
                # is told the lease is lost: a ``StoreError`` here would say renewed.
                try:
                    index = self._close_lost(renewal)
                except (StoreError, AuditError) as exc:
                    # The log refusing the outcome (``AuditError``), or not verifying
                    # (``TamperDetected``, one too): the lease is lost all the same, and that is
                    # what the holder must learn (until review R88d a log that did not verify was
                    # told here as itself, and a caller catching ``LeaseLost`` missed that its
                    # lease ended). Before the broker renews it is told as itself (above).
                    raise lost from exc
                except BaseException as exc:
                    if not _interrupt(exc):
                        raise
                    # A Ctrl-C at a store that hangs lands in that transaction and rolls it back:
                    # closed again before the interrupt is raised, as in every other handler here,
                    # unless it committed before the interrupt. Until a regression review (c) of
                    # R91 the allow was left with no outcome and its reservation held for ever.
                    _closed(exc, lambda: self._close_lost_again(renewal))
                self._outcome_span(renewal, "error", index)
                self._record_pending()
                raise
            except BaseException as exc:  # an interrupt too (Ctrl-C, a signal handler's exit)
                if acted:  # the lease runs the time this renewal added: it keeps its reservation
                    _closed(exc, functools.partial(self._link_kept, link))
                reason = f"lease {quoted(lease_id)} was not renewed: {_reason(exc, 'the broker renewed it')}"
                _closed(exc, lambda: self._abandon(renewal, reason))
            try:
                self._link_kept(link)
            except BaseException as exc:
                if not _interrupt(exc):
                    # The store's error: renewed all the same (the docstring), the link kept
                    # and written at the next call, before the lease's end is settled.
                    raise
                # A Ctrl-C at a store that hangs lands in the link's own transaction and rolls it
                # back: linked again (``_link`` links only what is still held, never twice). Kept
                # first if it was not yet: a Ctrl-C as ``_link_kept`` began dropped it (until a
                # regression review of R93 this wrote only the links kept already).
                _closed(exc, functools.partial(self._link_kept, link))
            self._record_pending()
        return renewed

    def _close_lost(self, renewal: LeaseDecision) -> int:
        """Close the allow of ``renewal``, whose lease ended before the broker renewed it
        (``renew``): its reservation returned and an ``error`` outcome appended, in one
        transaction (``_close_allow``: the lease's own decision row, another allow's, is kept);
        the outcome's index."""
        return self._close_allow(renewal, f"lease {quoted(renewal.request_id)} ended before it was renewed")

    def _close_lost_again(self, renewal: LeaseDecision) -> None:
        """``_close_lost`` once more after an interrupt in it, which may have come after its
        commit: an allow that has an outcome already is left as it is."""
        allow = renewal.audit_index
        if allow is not None and any(entry.kind == "outcome" for entry in self.gate.audit.referring(allow)):
            return
        self._close_lost(renewal)

    def _renewal_decided(self, identity: AgentIdentity, lease_id: str) -> tuple[str, Authorization, Lease]:
        """Decide the renewal of ``identity``'s live lease ``lease_id`` (``renew``): its resource,
        the allow and the lease as it was decided. Raises what ``renew`` raises before the broker renews, the
        store's failure as ``StoreError`` or, for an outcome the audit log refused outside a
        transaction, ``AuditError`` (each of which ``renew`` gives as ``NotRenewed``, but
        ``TamperDetected`` as is)."""
        self._record()
        self._applied(self.broker.advance)  # a lease that expired meanwhile is not renewed
        request = self._holder_request(identity, lease_id)
        lease = next((held for held in self.broker.leases() if held.id == lease_id), None)
        if lease is None:
            # Still waiting: there is no lease to extend, and the broker would refuse it after
            # an allow that nothing settles (until review R40 an ``allow`` of the renewal was
            # audited all the same, with no outcome).
            raise LeaseLost(
                f"lease {quoted(lease_id)} is not granted yet: a waiting request has nothing to renew"
            )
        resource = _resource_or_any(request)
        call = self._call(resource, request, self._extension(request, lease))
        if (left := _outlived(identity, self._ttl(request))) is not None:
            reason = f"renewal of lease {quoted(lease_id)} refused: {left}"
            raise Denied(reason, self.gate.record_refusal(identity, call, (reason,)).decision)
        # A lease behind an approval gate was approved when it was granted: its renewals are
        # not asked again (an approval is for one call; ``approval_gates=False``). What a
        # renewal checks is the authority, and its budget, reserved with the allow.
        auth = self.gate.authorize(identity, call, approval_gates=False)
        if not auth.allowed:
            raise Denied(f"renewal of lease {quoted(lease_id)} refused: {auth.explain()}", auth.decision)
        return resource, auth, lease

    def _extended(self, decided: Lease, earlier_events: int) -> bool:
        """Whether ``Broker.renew``, which raised, extended ``decided`` (the lease as its renewal
        was decided): the broker's lease of that very request, live or notified or ended in that
        call (an event after the first ``earlier_events`` of ``Broker.undelivered``, which earlier
        calls left), is another ``Lease`` than ``decided``. ``Broker.renew`` replaces the lease it
        extends, and nothing before that in the call replaces it (the clock applied first only
        ends a lease). Told by identity, not by a later expiry: until a regression review (c) of
        R91 a renewal that set the expiry where it was (renewed at the clock reading of its grant)
        or sooner (``Broker.ttl_s`` lowered since) counted as not renewed, its allow closed as
        an ``error`` while its ``StoreError`` told the caller it was renewed. Asked with the
        broker's lock held since before ``Broker.renew`` (``renew``)."""
        request = decided.request
        seen = [lease for lease in self.broker.leases() if lease.request is request]
        seen += [
            event.lease
            for event in self.broker.undelivered()[earlier_events:]
            if isinstance(event, LeaseEnded | CheckpointNotice) and event.lease.request is request
        ]
        return any(lease is not decided for lease in seen)

    def advance(self) -> list[BrokerEvent]:
        """Apply the clock (expiries, grace ends, timeouts, grants that follow); the events are
        audited, and returned with those of earlier calls that returned none (``_delivered``)."""
        with self._lock:
            self._record()
            self._take(self.broker.advance)
            self._record()
            return self._delivered()

    def _applied(self, apply: Callable[[], list[BrokerEvent]]) -> StoreError | None:
        """Apply the broker's clock with ``apply`` (``Broker.advance``, or ``Broker.end_due``,
        which tries no placement) and audit what it ended or granted, before a call reads what is
        live. Returns the journal's ``StoreError``: the clock is applied all the same, its events
        wait in the broker for a later call, and the call goes on (until review R85 only the first
        renewal of an outage did, the others failing here, the lease unrenewed). Raises only the
        store's error recording an event (it is recorded first at the next call, ``_record``)."""
        try:
            self._take(apply)
        except StoreError as exc:
            return exc
        self._record()
        return None

    def reconcile(self) -> list[str]:
        """End the recorded decisions whose lease or request the broker does not have; their ids.

        For a restart whose broker lost leases (they were made after the journal's last write, or
        their end could not be recorded before the process stopped): call it once the broker is
        restored. Each is audited as ``lease_lost``; one whose end the broker has not given out
        yet (a call raised after it, ``Broker.undelivered``) is left to that end, recorded at the
        next call at the time held. The time a lost lease was held is not known:
        one whose grant is in the log (a ``lease_granted`` outcome of its decision) may have held
        its GPUs until its expiry, so its reservations are charged whole; a request lost while it
        waited held nothing, and its reservations are returned. (Until review R42 every lost
        lease's reservations were returned: a lease whose end the store refused just before a
        restart was never charged for the time it held.)

        Raises ``NotWriter`` (a ``StoreError``), ending nothing, when the broker's journal is not
        its name's writer: another broker process writes the name, or wrote it since this broker
        restored it, and its live leases are not lost (until review R96 they were ended as
        ``lease_lost``, charged whole, while that process ran them); ``StoreError`` when the
        store fails. The journal is written first, so this call takes the name over.
        """
        with self._lock:
            self._record()  # an end not recorded yet is settled at its time held, not as lost
            if self.broker.journal is not None:
                self.broker.write_journal()
            live = {lease.id for lease in self.broker.leases()} | {q.request.id for q in self.broker.queue()}
            # An end the broker has not given out yet (a call that raised after it) closes its
            # decision at the next call, at the time held: the request is not lost.
            live |= {_subject(event).id for event in self.broker.undelivered()}
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

    def _holder_request(self, identity: object, lease_id: str) -> GangRequest:
        """The request of ``identity``'s live lease or waiting request ``lease_id``; ``LeaseLost``
        when there is none (an id that is not text names none, and an identity that is no
        ``AgentIdentity``, ``None`` included, holds none: until review R85 it was an
        ``AttributeError``, where ``submit`` refuses it, audited)."""
        _an_id(lease_id)
        found = {lease.id: lease.request for lease in self.broker.leases()}
        found.update((q.request.id, q.request) for q in self.broker.queue())
        request = found.get(lease_id)
        if request is None or not isinstance(identity, AgentIdentity) or request.holder != identity.did:
            # One answer for both: another holder's live id is none of the caller's business (a
            # different one would tell any identity which of another tenant's ids are live).
            raise LeaseLost(
                f"lease {quoted(lease_id)} is not held by you (released, expired, preempted, or never yours)"
            )
        return request


def _subject(event: BrokerEvent) -> GangRequest:
    """The request ``event`` is about: the lease's (granted, notified, ended) or the waiting one's."""
    if isinstance(event, Granted | CheckpointNotice | LeaseEnded):
        return event.lease.request
    return event.request


def _interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` interrupts the call rather than fails it: a Ctrl-C's
    ``KeyboardInterrupt``, a signal handler's ``SystemExit``, anything that is no ``Exception``."""
    return not isinstance(exc, Exception)


def _closed(exc: BaseException, close: Callable[[], None]) -> NoReturn:
    """Raise ``exc`` once ``close`` has settled what it left open (an allow closed, a renewal
    linked). An interrupt (``_interrupt``) is raised whatever ``close`` raises: a Ctrl-C is often
    pressed at a store that hangs or fails, and the store's error, logged and chained to it
    (its ``__cause__``), would otherwise reach the caller in its place, and a caller that
    retries on ``StoreError`` would swallow the Ctrl-C (until a regression review of R91 it did).
    An error of ``close`` after any other ``exc`` is raised as the call's error, ``exc`` its
    context, as before."""
    try:
        close()
    except Exception as failed:
        if not _interrupt(exc):
            raise
        _log.error(
            "GatedBroker: a call interrupted (%s) could not be settled (%s: %s); the interrupt is raised",
            type(exc).__name__,
            type(failed).__name__,
            failed,
        )
        raise exc from failed
    raise exc


def _reason(exc: BaseException, before: str = "the broker took the request") -> str:
    """The reason of the ``error`` outcome of an allow that ``exc`` ended ``before`` the broker
    acted on it: the error's text (its class name if it has none), an interrupt named as one."""
    if _interrupt(exc):
        return f"interrupted ({type(exc).__name__}) before {before}"
    return str(exc) or type(exc).__name__
