"""What becomes of a gated lease's decision (``_Recording``, a part of ``GatedBroker``; the rules
are the ``GatedBroker`` module's docstring): the broker's events audited as ``outcome`` entries
that refer to the decision, in order, none lost when the store fails; the lease's budget settled
at its end (the time held, all it reserved, or nothing); a renewal's reservations linked to its
lease's decision."""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable
from typing import Literal, NoReturn

from agentgate.audit.spans import lease_outcome_span
from agentgate.dispatch.broker._broker import Broker
from agentgate.dispatch.broker._lease_calls import _resource_or_any
from agentgate.dispatch.broker._model import (
    BrokerEvent,
    CheckpointNotice,
    Granted,
    LeaseEnded,
    TimedOut,
    Withdrawn,
)
from agentgate.dispatch.broker._quoting import quoted
from agentgate.errors import AuditError, BrokerError, CommitUnknown, StoreError
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.gate._records import recordable
from agentgate.policy._schema import lease_cost
from agentgate.store import Transaction
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision, Reservation
from agentgate.store.ledger import stored_unit

_MONEY = ("usd_micros", "micro_usd")
"""The budget units a lease's price is reserved in (the Gate prices money under both names)."""

Charges = dict[str, dict[str, int]]
"""What each grant was charged, by unit: an outcome entry's ``charges``."""

Held = tuple[int, float] | Literal["reserved"] | None
"""What a lease's end is charged for: the GPUs and seconds it held, everything reserved for it
(a granted lease lost in a restart), or nothing (``None``: it never held GPUs)."""


class _Recording:
    """``GatedBroker``'s outcomes and settlements (module docstring)."""

    # The gated broker's state this part reads and sets (``GatedBroker.__init__`` sets it).
    gate: Gate
    broker: Broker
    decisions: BrokerDecisionStore
    _unrecorded: deque[BrokerEvent]
    _undelivered: list[BrokerEvent]
    _commit_unknown: tuple[BrokerEvent, tuple[LeaseDecision, str, int]] | None
    _unlinked: deque[Callable[[], None]]

    def _price(self, resource: str) -> int | None:
        spec = self.gate.policy.document.gpus.get(resource.removeprefix("gpu:"))
        return None if spec is None else spec.cost_per_gpu_hour

    def _record_pending(self) -> None:
        """Audit the events ``Broker.renew`` caused (other leases' expiries and grace ends, the
        grants that follow), which it journals but does not return. Until review R40 they waited
        for the next call: a restart before it lost them from the log although the journal had
        them, and ``reconcile`` then returned an expired lease's reservation whole, its holder
        never charged for the time it held. A journal write that fails leaves them queued in the
        broker for its next call, as any call's events; an outcome that cannot be recorded leaves
        them with this GatedBroker, recorded first at its next call (the renewal stands)."""
        try:
            self._take(self.broker.advance)
            self._record()
        except (StoreError, AuditError):  # an outcome entry the log refused: as the store's error
            return

    def _take(self, call: Callable[[], object]) -> None:
        """Make the broker call ``call`` (``Broker.submit``, ``release``, ``advance``,
        ``end_due``) with the events it gives out put in ``_unrecorded`` (recorded by the next
        ``_record``) inside the broker's own locked section (``Broker.sink``, set for this call
        only: a call made on the broker directly keeps its events to itself). ``Broker`` gives
        out each event once, and a Ctrl-C that CPython handles at a release of the broker's lock
        (where a pending signal is handled, at any depth) would otherwise drop them as the call
        returns: until a regression review of R92 a lease released so was never audited as
        ended, its decision and reservation held until ``reconcile`` charged it all it reserved,
        and until a second one they were kept only once the call returned, lost to an interrupt
        at the exit of its own ``with``. Raises what ``call`` raises, nothing kept where it raised
        before its events were given out (the broker keeps them: ``Broker.undelivered``)."""
        with self.broker._lock:
            self.broker.sink = self._unrecorded
            try:
                call()
            finally:
                self.broker.sink = None

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
        reservation per unit and chain, not one per renewal; one that has none is added.

        Only the reservations still held are linked, read under the log's lock, which a hand
        settlement (``store.held.settle_held``) takes too before it looks for the lease holding
        a reservation: one settled by hand since the renewal's decision made it is not the
        lease's to settle. Until review R66 it was linked all the same (``merge`` refused it, and
        it was kept apart), and the lease's end failed on it (already settled): the end was never
        recorded and the lease's own reservation stayed held for ever."""
        with self.gate.store.transaction() as tx:
            self.gate.audit.lock(tx)  # before any row: the lock order of every Gate write
            open_ = self.gate.ledger.still_held([reservation for reservation, _u, _a in held], tx)
            held = tuple(r for r in held if r[0] in open_)
            if self._merge(lease_id, held, tx) or self.decisions.add_reservations(lease_id, held, tx):
                return
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
            self.decisions.add(linked, tx)
            index = self._append(
                linked,
                "lease_granted",
                "granted before its first decision; linked to it by this renewal",
                0,
                tx,
            )
        self._outcome_span(linked, "lease_granted", index)

    def _link_kept(self, link: Callable[[], None]) -> None:
        """Write ``link`` (a renewal's ``_link``, once the broker renewed its lease), kept in
        ``_unlinked`` until it commits: one the store fails (or an interrupt rolls back) is written
        first at the next ``_record``, before any event, so before the lease's end settles it.
        Until review R93 a ``StoreError`` in the link was raised and the link dropped: the
        extension was never charged and its reservation stayed held for ever, tied to nothing."""
        if link not in self._unlinked:  # kept once: written again after an interrupt
            self._unlinked.append(link)
        self._write_links()

    def _write_links(self) -> None:
        """Write the renewals' links kept in ``_unlinked``, in order; raises the store's error of
        the first that fails, it and those after it kept. A link is left only once it committed,
        and written again after an interrupt that may have come after its commit (``_merge``
        links a reservation once)."""
        while self._unlinked:
            self._unlinked[0]()
            self._unlinked.popleft()

    def _merge(self, lease_id: str, held: tuple[Reservation, ...], tx: Transaction) -> bool:
        """Merge ``held`` into ``lease_id``'s decision (``_link``), in ``tx``; False if it has none
        (or ``held`` is empty). A reservation the decision holds already is left as it is, so that
        linking a renewal again is linking it once (``GatedBroker.renew`` links it again after an
        interrupt that may have come after the link's commit)."""
        decided = self.decisions.get(lease_id, tx) if held else None
        if decided is None:
            return False
        kept = list(decided.reservations)
        linked = {reservation for reservation, _unit, _amount in kept}
        for reservation, unit, amount in held:
            if reservation in linked:  # a link interrupted after its commit, written again
                continue
            for i, (into, kept_unit, kept_amount) in enumerate(kept):
                if kept_unit == unit and self.gate.ledger.merge(into, reservation, tx):
                    kept[i] = (into, unit, kept_amount + amount)
                    break
            else:  # taken from another chain (renewed under another grant): kept apart
                kept.append((reservation, unit, amount))
        self.decisions.set_reservations(lease_id, kept, tx)
        return True

    def _record(self) -> None:
        """Audit the events the broker gave out (``_unrecorded``, kept there by ``_take``), in
        order. An outcome that cannot be recorded (``StoreError``) raises, and it and the events
        after it stay unrecorded, to be recorded first at the next call (until review R40 they
        were lost: the lease's reservation stayed held and its allow had no end).

        An event leaves ``_unrecorded`` once its outcome's transaction has committed, before the
        outcome's span is made; an interrupt raised out of the transaction's end (a Ctrl-C
        handled after the block) leaves it there only if the log does not hold its outcome
        (``_logged``). Until a regression review of R92 it left only once the span was made, and
        an interrupt in between recorded it again at the next call: two ends of one lease in the
        signed log. So for a ``CommitUnknown`` (the connection lost once COMMIT was sent: the
        server may have committed), and the log is read again for either before the event is
        written again at the next call (``_commit_unknown``), as the Gate does for its outcomes
        (until a second regression review of R92 such an outcome was written again: a second,
        unlinked end of the lease).

        The renewals' links a failed store left (``_unlinked``) are written first: an event may
        be the end of their lease, which settles what its decision holds."""
        self._write_links()
        while self._unrecorded:
            event = self._unrecorded[0]
            unknown = self._commit_unknown
            if unknown is not None:
                # Kept until the log is read (``_logged`` raising the store's error keeps it,
                # as does an interrupt meanwhile): until a third regression review of R92 it was
                # dropped first, and a store still out at this call had it written again at the
                # next, a second end of the lease.
                if unknown[0] is event and self._logged(*unknown[1]):
                    # The event leaves before its marker: an interrupt between the two leaves a
                    # marker naming no event first (ignored), never an event without its marker.
                    self._undelivered.append(self._unrecorded.popleft())  # committed after all
                    self._commit_unknown = None
                    self._outcome_span(*unknown[1])
                    continue
                self._commit_unknown = None
            written: tuple[LeaseDecision, str, int] | None = None
            try:
                with self.gate.store.transaction() as tx:
                    self.gate.audit.lock(tx)  # before any row, as every Gate write (docs/operations.md)
                    written = self._record_one(event, tx)
                self._undelivered.append(self._unrecorded.popleft())
            except BaseException as exc:
                # A store error there is its commit refused, nothing written, but for
                # ``CommitUnknown`` (the server may have committed); an interrupt (no
                # ``Exception``) may have come after the commit, or after the event left.
                unknown_end = not isinstance(exc, Exception) or isinstance(exc, CommitUnknown)
                still_first = bool(self._unrecorded) and self._unrecorded[0] is event
                if written is not None and unknown_end and still_first:
                    # Asked again before it is written again where the log does not show it now
                    # (or cannot be read): a commit may show by then.
                    self._commit_unknown = (event, written)
                    with contextlib.suppress(StoreError):
                        if self._logged(*written):
                            self._undelivered.append(self._unrecorded.popleft())
                            self._commit_unknown = None
                raise
            self._outcome_span(*written)

    def _logged(self, decided: LeaseDecision, status: str, index: int) -> bool:
        """Whether the log holds, at ``index``, the outcome ``status`` of ``decided`` that a
        transaction whose end is unknown wrote there: it committed. Raises the store's error
        where the log cannot be read (still unknown then); an entry that cannot be read for
        another reason (tampered) says no: an event recorded twice rather than never."""
        try:
            entry = self.gate.audit.entry(index)
        except StoreError:
            raise
        except Exception:  # past the log's end (``BeyondLogEnd``: not written), tampered
            return False
        return (
            entry.kind == "outcome"
            and entry.status == status
            and entry.ref == decided.audit_index
            and entry.principal == decided.principal
            and entry.resource == decided.resource
        )

    def _delivered(self) -> list[BrokerEvent]:
        """The events recorded since a call last returned them, for the call that returns them
        now: each event the broker gives out is returned once, by the call that records it or,
        where that call returns none (a refused ``submit``, ``renew``, a call that raised), by the
        next that returns events, as ``Broker`` itself returns every event since its last call
        that returned some. (Until a regression review of R87 the events of a refused submit's or
        a renewal's clock, a waiting request's grant among them, were audited and returned by no
        call, though a waiting holder learns of its grant from ``advance``.)"""
        events, self._undelivered = self._undelivered, []
        return events

    def _record_one(self, event: BrokerEvent, tx: Transaction) -> tuple[LeaseDecision, str, int]:
        """Write ``event``'s outcome (its lease's end settled) in ``tx``; what its span is made of:
        the decision it refers to, its status and its index."""
        status, reason = _describe(event)
        if isinstance(event, LeaseEnded):
            lease = event.lease
            deadline = math.inf if lease.notice_deadline is None else lease.notice_deadline
            # When the broker ended it, not now: events a failed journal write held back
            # are recorded a call later.
            ended = self.broker.clock() if event.at is None else event.at
            end = min(ended, lease.expires_at, deadline)
            held = (len(lease.gpus), max(0.0, end - lease.granted_at))
            closed, index = self._ended(
                tx, lease.id, lease.request.holder, _resource_or_any(lease.request), status, reason, held
            )
            return closed, status, index
        if isinstance(event, TimedOut | Withdrawn):
            request = event.request
            closed, index = self._ended(
                tx, request.id, request.holder, _resource_or_any(request), status, reason
            )
            return closed, status, index
        request = event.lease.request
        decided = self.decisions.get(request.id, tx)
        if decided is None:  # queued around the gate
            decided = _unlinked(request.id, request.holder, _resource_or_any(request))
        return decided, status, self._append(decided, status, reason, 0, tx)

    def _refuse_taken(self, decided: LeaseDecision) -> NoReturn:
        """Return an allowed request's reservations and record its ``error`` outcome, its id being
        another holder's live one; raise ``BrokerError``. (That holder's decision is untouched.)"""
        reason = f"request {quoted(decided.request_id)} is already live"
        self._abandon(decided, reason)
        raise BrokerError(reason)

    def _abandon(self, decided: LeaseDecision, reason: str) -> None:
        """Return the reservations of an allow the broker never saw and append its ``error``
        outcome, in one transaction; its decision's row, if it is this allow's, is forgotten."""
        self._outcome_span(decided, "error", self._close_allow(decided, reason))

    def _close_allow(self, decided: LeaseDecision, reason: str) -> int:
        """``_abandon`` but for the outcome's span, the caller's to make: the ``error`` outcome's
        index."""
        with self.gate.store.transaction() as tx:
            self.gate.audit.lock(tx)
            recorded = self.decisions.get(decided.request_id, tx)
            if recorded is not None and recorded.audit_index == decided.audit_index:
                self.decisions.remove(decided.request_id, tx)  # written, though the store said not
            self._settle(tx, decided, None)  # returns all: nothing charged
            return self._append(decided, "error", reason, 0, tx)

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
            ended, index = self._ended(tx, request_id, holder, resource, status, reason, held)
        self._outcome_span(ended, status, index)

    def _ended(
        self,
        tx: Transaction,
        request_id: str,
        holder: str,
        resource: str,
        status: str,
        reason: str,
        held: Held = None,
    ) -> tuple[LeaseDecision, int]:
        """``_end`` in ``tx``, the audit log's lock taken, but for the span: the decision the
        outcome refers to (one ``_unlinked`` where there is none) and the outcome's index."""
        decided = self.decisions.get(request_id, tx)
        delta, charges = 0, Charges()
        if decided is not None:
            delta, charges = self._settle(tx, decided, held)
            self.decisions.remove(request_id, tx)
        ended = decided or _unlinked(request_id, holder, resource)
        return ended, self._append(ended, status, reason, delta, tx, charges)

    def _settle(self, tx: Transaction, decided: LeaseDecision, held: Held) -> tuple[int, Charges]:
        """Commit what the lease used of its reservations and return the rest; the amount committed
        in the unit of the first reservation (the caller's own budget's, see ``Gate._caps``), and
        what each grant was charged by unit (the outcome's ``charges``; empty when all was
        returned). Until review R61 a lease's outcome had no ``charges``. A reservation whose
        unit no budget can be in (``ledger.stored_unit``: its decision's row edited outside
        agentgate) is charged all it holds and named in no ``charges``: until review R89 its text
        went into the signed log as a unit charged.

        Each decision's call is spent once the lease was granted. Money: the GPUs times the held
        seconds (rounded up) at the lease's price, taken from its reservations in order. They
        cover the lease from its grant to its expiry, rounded up, which bounds the time held; the
        ``min`` keeps the charge within them for a clock that jumps.
        """
        if held is None:
            for reservation, _unit, _amount in decided.reservations:
                self.gate.ledger.release(reservation, tx)
            return 0, {}
        reserved = {unit: sum(a for _, u, a in decided.reservations if u == unit) for unit in _MONEY}
        if held == "reserved":
            owed = reserved
        else:
            gpus, seconds = held
            price = decided.cost_per_gpu_hour
            cost = 0 if price is None else lease_cost(gpus, seconds, price)
            owed = {unit: min(cost, reserved[unit]) for unit in _MONEY}
        committed = 0
        charges: Charges = {}
        primary: str | None = None  # the caller's own unit: the first reservation's
        for position, (reservation, stored, amount) in enumerate(decided.reservations):
            used = min(amount, owed[stored]) if stored in owed else amount
            if stored in owed:
                owed[stored] -= used
            # None: a unit no budget is in (the row edited outside agentgate), charged but named
            # in no charges, as ``budget settle`` and ``tasks settle`` settle one.
            unit = stored_unit(stored)
            if position == 0:
                primary = unit
            for grant_id, n in self.gate.ledger.charge(reservation, used, tx).items():
                if unit is not None:  # summed: a renewal under another chain keeps its own reservation
                    by_unit = charges.setdefault(grant_id, {})
                    by_unit[unit] = by_unit.get(unit, 0) + n
            # An audit entry's budget_delta is in one unit, never a sum of several.
            if position == 0 or (unit is not None and unit == primary):
                committed += used
        return committed, charges

    def _append(
        self,
        decided: LeaseDecision,
        status: str,
        reason: str,
        delta: int,
        tx: Transaction | None = None,
        charges: Charges | None = None,
    ) -> int:
        """Append the lease's ``outcome`` entry (in ``tx``, else committed on its own), with the
        ``charges`` of its settlement where it charged any; its index. Its span
        (``_outcome_span``) is the caller's to make once the entry is committed. ``reason`` is
        written as the log can hold it (``recordable``: a lone surrogate escaped): it may quote an
        error's text, and until a regression review (b) of R91 such a text refused the entry
        (``InputError``, raised in place of the error), and the allow it closed stayed open, its
        reservation held for ever."""
        return self.gate.audit.append(
            {
                "kind": "outcome",
                "principal": decided.principal,
                "chain_hash": decided.chain_hash or None,
                "resource": decided.resource,
                "status": status,
                "ref": decided.audit_index,
                "budget_delta": delta,
                "reasons": [recordable(reason)],
                "charges": charges or None,
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


def _held(auth: Authorization) -> tuple[Reservation, ...]:
    return tuple((reservation, unit, amount) for reservation, unit, amount in auth.reservations)


def _unlinked(request_id: str, holder: str, resource: str) -> LeaseDecision:
    """A request with no recorded decision (queued on the broker directly): audited without ``ref``."""
    return LeaseDecision(request_id, holder or "unknown", "", resource, None, None)


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
        if event.reason is not None:  # ``GatedBroker._revoked_grant``, the one check it makes
            return "request_revoked", f"withdrawn before it took GPUs: {event.reason}; held nothing"
        return "request_withdrawn", "withdrawn by its holder while it waited; held nothing"
    return "lease_timed_out", f"waited {event.waited_s:g} s without being placed whole; held nothing"
