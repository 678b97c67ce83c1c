"""The GPU broker: gang leases with quotas, borrowing, reclaim, preemption and expiry.

Written by hand because this is agentgate's own idea: Kueue's admission rules (nominal quota,
cohort borrowing, reclaim, priority preemption) applied to leases on a topology, inside one
process, without Kubernetes. The rules (docs/broker.md has worked examples):

* **All or nothing.** A request is granted all its GPUs at once or waits with none. A waiting
  request times out at its deadline, ``timeout_s`` after it was submitted or sooner where
  ``submit``'s ``wait_s`` is shorter, with nothing held, nominated or not.
* **Quota.** A tenant may use its ``nominal`` quota, and borrow up to ``borrowing_limit`` more
  from the unused nominal quota of its cohort. The cohort as a whole never exceeds the sum of its
  members' nominal quotas. A notified lease's GPUs count against new grants until it ends.
* **Preemption.** A request that does not fit may preempt, Kueue-style: lower-priority leases of
  its own tenant, and, when the request stays within its tenant's nominal quota, any lease of a
  cohort member that is borrowing (reclaim). Victims are chosen borrowing-tenants first, then
  lowest priority, then newest, and the set is minimized; a lease whose grace would not end
  before the request's wait does is no candidate (a lease with no grace always is one). Each victim gets a ``CheckpointNotice`` and keeps its GPUs
  until it releases them or its grace ends; the preemptor is *nominated*: the GPUs it will get
  are reserved so nobody else takes them, and it is granted only when every victim has ended
  and its quota holds it, if that is before its ``timeout_s`` is over (a caller that bounds the
  wait, as ``GatedBroker`` does to keep a lease within its grant, is never granted later); else
  it times out and its reservation goes back.
* **Draining.** A gang that waits for one group at its innermost level (communication-bound, or
  with a topology constraint) and has waited ``drain_after_s`` may reserve the group that is
  closest to holding it: its free GPUs are reserved at once and the busy ones as their leases
  end, nobody else is placed there meanwhile, and the gang is granted when all are free. At most
  ``max_draining`` gangs drain at once (default 0: off), since reserved GPUs sit idle; it bounds
  how long small gangs that backfill every freed GPU can keep a whole domain from coming free.
* **Expiry.** A lease lasts ``ttl_s`` after its grant or its last renewal; a holder that dies
  stops renewing and its GPUs return at expiry.
* **Order.** Waiting requests are tried by priority, then arrival (Kueue's BestEffortFIFO: one
  that does not fit does not block smaller ones behind it). A call asks again only those whose
  answer may have changed since they were last tried, with the answers of a pass over them all
  (``_place_waiting``): queuing n requests that cannot be placed costs about n log n, with
  draining on too (the queue counts the draining requests, ``_Queue.draining``).

Every public call that changes the state first applies what the clock says has happened
(expiries, grace ends, timeouts), then does its work, then tries the queue (a call refused with an
error too, before it raises: its events come out of the next call); ``end_due`` only applies the
clock, for a caller that submits next (``next_deadline`` is now, while a request waits, until a
call tries the queue). The clock is injectable, so tests and the benchmark run in simulated time.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, MutableSequence, Sequence
from typing import NoReturn, Protocol

from agentgate._numbers import finite, is_number
from agentgate.dispatch.broker._model import (
    MIN_TTL_S,
    BrokerEvent,
    BrokerSnapshot,
    EndReason,
    GangRequest,
    Granted,
    Lease,
    LeaseEnded,
    QueuedRequest,
    TenantQuota,
    TimedOut,
    Withdrawn,
    finite_non_negative,
    short_ttl,
    shown_number,
)
from agentgate.dispatch.broker._placement import (
    FreeIndex,
    PlacementPolicy,
    TopologyAware,
    eligibility,
    levels_to_try,
    nested,
)
from agentgate.dispatch.broker._preemption import _Preempting
from agentgate.dispatch.broker._quota import QuotaBook
from agentgate.dispatch.broker._quoting import quoted
from agentgate.dispatch.broker._restore import _check_snapshot_shapes, _Restoring
from agentgate.dispatch.broker._topology import Topology
from agentgate.dispatch.broker._waiting import _Queue, _Waiting
from agentgate.errors import BrokerError, LeaseLost, NotWriter, StoreError

Clock = Callable[[], float]

GrantCheck = Callable[[GangRequest], str | None]
"""``Broker.grant_check``: why a waiting request may no longer take GPUs, or ``None`` when it may."""

GRANT_CHECK_RETRY_S = 1.0
"""How long after a call in which ``Broker.grant_check`` raised ``StoreError`` (its store could not
be read) ``Broker.next_deadline`` names, in the broker's clock: a driver sleeping until then asks
the store again once a second while it stays down, not in a loop (until a regression review of
R89 it named the clock's now). So too after a call whose pass over the queue, or whose grant of a
nominated request as a lease ended, raised (``grant_check`` raising any other error, or the
placement policy raising), the call raising it: until a regression review of R90 a pass that raised
made it now for as long as each pass raised, and a driver that logs the error and sleeps until
``next_deadline`` called ``grant_check`` in a loop, the broker's lock held."""


class SteadyWallClock:
    """The broker's default clock: wall time that never jumps. It reads the wall clock once, when
    made, and moves on with the monotonic clock, so lease times stay dates (journaled, shown, and
    compared with a restarted broker's) while a step of the host's clock (NTP, a VM resumed, a
    date set by hand) moves no expiry, grace end or timeout: with ``time.time`` a step forward by
    more than a lease's ``ttl_s`` ended every lease while its holder still ran."""

    def __init__(self) -> None:
        self._wall, self._steady = time.time(), time.monotonic()

    def __call__(self) -> float:
        return self._wall + (time.monotonic() - self._steady)

    def not_before(self, moment: float) -> None:
        """Move this clock forward, if it is behind, so that it reads ``moment`` now; never back.
        ``Broker.restore`` calls it with the snapshot's time: a host whose clock is behind the one
        that wrote the snapshot (a failover to a host that lags, a clock reset at boot) would
        otherwise keep every lease and wait that much longer, and settle a lease's time held
        short by as much."""
        behind = moment - self()
        if behind > 0:
            self._wall += behind


class LeaseJournal(Protocol):
    """Where the broker writes its state after each change (``agentgate.store.broker_leases``)."""

    def save(self, snapshot: BrokerSnapshot) -> None:
        """Replace the stored state with ``snapshot``; raises ``StoreError`` on failure."""
        ...

    def take_over(self, snapshot: BrokerSnapshot) -> None:
        """Make the next ``save`` the state's writer, in place of the broker it was restored from
        (``snapshot``, the state restored); that ``save`` fails if the state was written since."""
        ...


class Broker(_Restoring, _Preempting):
    """Leases GPUs of one topology to gangs. Thread-safe (one lock around every call).

    ``quotas`` lists every tenant that may ask; ``policy`` defaults to ``TopologyAware``.
    ``ttl_s`` and ``grace_s`` are the defaults for requests that do not set their own;
    ``locality_wait_s`` is how long a communication-bound gang (or one with a preferred
    constraint) waits for its preferred placement before it accepts a looser one (``inf``:
    never); ``drain_after_s`` and ``max_draining`` govern draining (module docstring; off by
    default). Raises ``BrokerError`` for a negative setting, a ``ttl_s`` of 0, a ``max_draining``
    that is not an integer, or a tenant with two quotas.
    """

    def __init__(
        self,
        topology: Topology,
        quotas: Sequence[TenantQuota],
        *,
        policy: PlacementPolicy | None = None,
        clock: Clock | None = None,
        ttl_s: float = 60.0,
        grace_s: float = 120.0,
        locality_wait_s: float = 1800.0,
        drain_after_s: float = 600.0,
        max_draining: int = 0,
        journal: LeaseJournal | None = None,
    ) -> None:
        for name, value in (("ttl_s", ttl_s), ("grace_s", grace_s)):
            if not finite_non_negative(value):
                raise BrokerError(f"broker {name} must be finite and >= 0, got {shown_number(value)}")
        if isinstance(max_draining, bool) or not isinstance(max_draining, int) or max_draining < 0:
            # A count of gangs (until review R89 0.5 was taken, and let one gang drain; so were
            # 2.5 and 1e300), as the benchmark's ``--max-draining`` is.
            raise BrokerError(
                f"broker max_draining must be an integer >= 0 (gangs draining at once), "
                f"got {shown_number(max_draining)}"
            )
        if ttl_s < MIN_TTL_S:  # as a request's own (``GangRequest``): a lease must outlive its grant's call
            raise BrokerError(f"broker {short_ttl(ttl_s)}")
        # An infinite wait is allowed: never loosen a preference, never drain.
        for name, value in (("locality_wait_s", locality_wait_s), ("drain_after_s", drain_after_s)):
            if not (finite_non_negative(value) or value == math.inf):
                raise BrokerError(f"broker {name} must be >= 0, got {shown_number(value)}")
        self.topology = topology
        self.policy: PlacementPolicy = policy or TopologyAware(topology)
        self.clock: Clock = SteadyWallClock() if clock is None else clock
        self.ttl_s = ttl_s
        self.grace_s = grace_s
        self.locality_wait_s = locality_wait_s
        self.drain_after_s = drain_after_s
        self.max_draining = max_draining
        self.journal = journal
        self.grant_check: GrantCheck | None = None
        """Asked, when set, as a waiting request is about to take GPUs (its grant, a preemption's
        nomination, a draining reservation), not at every call: ``None`` lets it; a reason
        withdraws it (``Withdrawn`` with that reason, a reservation it held going back); a
        ``StoreError`` (its store cannot be read) leaves it waiting as it was, asked again at
        the next call (``next_deadline`` names one ``GRANT_CHECK_RETRY_S`` later). ``GatedBroker``
        sets it: a request whose grant was revoked while it waited is not granted (``_may_take``)."""
        self._quota = QuotaBook(quotas)
        self._free = FreeIndex(topology)
        self._owner: list[str | None] = [None] * len(topology)
        self._reserved: list[str | None] = [None] * len(topology)
        self._leases: dict[str, Lease] = {}
        # notified leases: not charged to their tenant any more, but leaving (QuotaBook.leave)
        self._victims: set[str] = set()
        self._waiting = _Queue()
        self._seq = 0
        self._moves = 0
        """Counts the changes of what a waiting request is placed against: GPUs taken, freed or
        reserved, quota charged, leases granted, notified or ended (``_place_waiting``)."""
        self._settled: tuple[int, tuple[object, ...]] | None = None
        """``_moves`` and ``_settings`` when the last pass over the queue moved nothing, tried at
        ``_settled_now``; ``None`` when it moved something, or did not finish."""
        self._settled_now = -math.inf
        self._retry_at = math.inf
        """While a waiting request is tried: the earliest time its answer may change though
        nothing else does (a preemption candidate's grace no longer ending before its wait does),
        ``-inf`` when it must be tried at the next call (``grant_check`` could not be read)."""
        self._outbox: list[BrokerEvent] = []
        self.sink: MutableSequence[BrokerEvent] | None = None
        """Where each call that returns events (``submit``, ``release``, ``advance``, ``end_due``)
        also puts them, before it releases its lock (``_drain``); ``None``: returned only.
        ``GatedBroker`` sets it, around each call it makes, to the events it is to record: a
        Ctrl-C that CPython handles at the release of the lock (where a pending signal is
        handled) would otherwise drop the events as the call returns, the outbox emptied (until
        a second regression review of R92 a lease released so was never audited as ended, its
        decision and reservation held until ``reconcile`` charged it all it reserved)."""
        self._dirty = False
        self._due = False
        """Whether a lease granted or notified in this call is due already (``_schedule``)."""
        self._tried_with: tuple[object, ...] | None = None
        """The settings (``_settings``) of the last pass over the queue, finished or raised: the
        wakes of the waiting requests were worked out with them. ``None`` when the queue is
        untried: ``end_due`` applied the clock since, ``restore`` queued it, or the last pass
        moved something with a request still waiting ahead of that move (``_place_waiting``).
        While a request waits and this is not the settings now, ``next_deadline`` says now: the
        GPUs ``end_due`` freed may fit one, a changed setting may place one, and so may a move
        made after its answer was worked out."""
        self._unreadable = False
        """Whether ``grant_check`` raised ``StoreError`` since this call began trying the queue."""
        self._check_retry_at = math.inf
        """When ``next_deadline`` names the next try of a request whose ``grant_check`` raised
        ``StoreError`` at the last call that tried the queue, or of the queue after a call whose
        pass over it raised (``GRANT_CHECK_RETRY_S`` after that call, ``_raised``), ``inf`` when
        none did."""
        self._lock = threading.RLock()
        self._largest: dict[tuple[str, str | None, float, str | None], int] = {}
        """(level, GPU type, memory, constraint level) -> GPUs of the largest group a gang with
        those filters could ever be placed in as one group at that level (``_local_possible``)."""

    # --- public calls ------------------------------------------------------------------------

    def submit(self, request: GangRequest, *, wait_s: float | None = None) -> list[BrokerEvent]:
        """Queue ``request`` and try to place it now; returns the events this call caused.

        It waits ``request.timeout_s`` at most, or ``wait_s`` where that is shorter: a caller
        bounds the wait this way while the request keeps the ``timeout_s`` it asked for
        (``GatedBroker`` bounds it by the grant's time left, and decides the request's renewals
        with the same arguments as the request). The wait's end is the queue entry's
        ``deadline``, journaled and restored as it is.
        Raises ``BrokerError`` for an unknown tenant, an id already live, a gang that could
        never be placed (more GPUs than the cluster, its quota, its filters or its required
        topology level allow), or a ``wait_s`` that is not a number >= 0 (``inf``: no bound but
        ``timeout_s``). The request is not queued when it raises (the queue is tried all the
        same, as the module docstring says).
        """
        with self._lock:
            now = self.clock()
            self._apply_time(now)
            try:
                self._check_placeable(request)
                if request.id in self._leases or request.id in self._waiting:
                    raise BrokerError(f"request {quoted(request.id)} is already live")
                wait = request.timeout_s if wait_s is None else _bounded_wait(request, wait_s)
            except BrokerError as refused:
                # The leases the clock ended make room all the same (until review R66 a refused
                # call left their GPUs free and unjournaled until another call came).
                self._refuse(now, refused)
            self._seq += 1
            self._waiting[request.id] = _Waiting(request, now, now + wait, self._seq)
            self._dirty = True
            self._schedule(now)
            return self._drain()

    def release(self, lease_id: str) -> list[BrokerEvent]:
        """End a lease now (or withdraw a waiting request); returns the events this call caused.

        Raises ``LeaseLost`` when there is no such live lease or waiting request (an id that is
        not text names none).
        """
        _an_id(lease_id)
        with self._lock:
            now = self.clock()
            self._apply_time(now)
            if lease_id in self._leases:
                self._end(lease_id, "released", now)
            elif lease_id in self._waiting:
                # Marked dirty by ``_unqueue`` and ``_end``, not for an unknown id, which changes nothing: until
                # review R85 it was written all the same, and a fresh broker over a name another
                # broker journals answered it with that journal's ``StoreError``, not ``LeaseLost``.
                waiting = self._waiting[lease_id]
                self._unqueue(waiting, Withdrawn(waiting.request))
            else:
                self._refuse(
                    now, LeaseLost(f"lease {quoted(lease_id)} is not held (released, expired or preempted)")
                )
            self._schedule(now)
            return self._drain()

    def renew(self, lease_id: str) -> Lease:
        """Extend a live lease to ``ttl_s`` from now and return it.

        A notified lease still ends at its notice deadline. Raises ``LeaseLost`` when the lease
        is not live (a holder that renews too late learns here that its GPUs are gone), its id
        is not text, or the queue this call tries preempts it with no grace, whether or not the
        journal write then fails (its error the cause), or the journal is not the broker name's
        writer (another broker process took the name over: ``NotWriter`` the cause, the renewal
        stands nowhere); ``StoreError`` when the journal write fails otherwise, the lease renewed
        all the same (in memory, journaled by the next write that succeeds).
        """
        _an_id(lease_id)
        with self._lock:
            now = self.clock()
            self._apply_time(now)
            lease = self._leases.get(lease_id)
            lost = LeaseLost(f"lease {quoted(lease_id)} is not held (released, expired or preempted)")
            if lease is None:
                self._refuse(now, lost)
            # Extended before the queue is tried and the journal written: until review R85 both
            # came first, and while the journal's store was out every renewal after the first
            # failed write raised before it extended the lease, which ended at its old expiry.
            self._leases[lease_id] = dataclasses.replace(lease, expires_at=now + self._ttl(lease.request))
            self._dirty = True
            unwritten: StoreError | None = None
            try:
                self._schedule(now)
            except StoreError as exc:
                unwritten = exc
            renewed = self._leases.get(lease_id)
            if renewed is None or isinstance(unwritten, NotWriter):
                # Preempted with no grace by a request the queue placed now: not held, whether or
                # not the journal then took it (until a regression review of R85 a failed write
                # raised ``StoreError``, which says the lease renewed). Or this broker is no
                # longer its name's writer: the one that took the name over ends the lease at
                # its old expiry and hands its GPUs on (until review R96 the journal's
                # ``StoreError`` said renewed, and a holder that believed it ran on them).
                raise lost from unwritten
            if unwritten is not None:
                raise unwritten
            return renewed

    def _refuse(self, now: float, refusal: Exception) -> NoReturn:
        """Raise ``refusal`` (a call refused: ``submit``'s ``BrokerError``, ``release``'s and
        ``renew``'s ``LeaseLost``) once the queue is tried and what the clock changed journaled,
        as for any call. A journal write that fails is the refusal's cause, not the answer: a
        ``StoreError`` says the call took effect (until a second regression review of R85 a lease
        that expired during an outage was ``StoreError`` from ``renew``, and from ``release`` and
        a refused ``submit`` until the reading after it)."""
        try:
            self._schedule(now)
        except StoreError as exc:
            raise refusal from exc
        raise refusal

    def advance(self) -> list[BrokerEvent]:
        """Apply expiries, grace ends and timeouts up to the clock's now, then try the queue.

        Returns every event since the last call that returned events.
        """
        with self._lock:
            now = self.clock()
            self._apply_time(now)
            self._schedule(now)
            return self._drain()

    def end_due(self) -> list[BrokerEvent]:
        """Apply expiries, grace ends and timeouts up to the clock's now, and journal them, without
        trying the queue: for a caller that submits next, whose ``submit`` tries it with the new
        request among those waiting, which then ranks as a ``submit`` alone would rank it
        (``GatedBroker.submit`` ends an earlier request with the same id this way, to audit its
        end before the new one's decision is linked to the id). A request nominated by a lease
        that ends is granted all the same, as any call's clock grants it.

        Until a call tries the queue, ``next_deadline`` is the clock's now while a request waits:
        a caller that stops after this (a ``GatedBroker`` request refused, or raising before
        ``submit``) leaves the GPUs it freed to the next ``advance``, not to the next timeout
        (until a regression review of R87 a driver sleeping until ``next_deadline`` left them
        idle beside a waiting request that fits).

        Returns every event since the last call that returned events. Raises ``StoreError`` when
        the journal write fails: the clock is applied all the same, and the events stay queued
        for the next call, as for any call.
        """
        with self._lock:
            now = self.clock()
            self._tried_with = None
            self._apply_time(now)
            self._save(now)
            return self._drain()

    def write_journal(self) -> None:
        """Write the state to the journal now, changed or not, applying no clock: the journal's
        writer check runs now. Raises ``NotWriter`` (a ``StoreError``) when another broker
        process is the name's writer, or wrote the state this broker restored since, and
        ``StoreError`` when the store fails: for a caller that must know this broker is the
        authority before it acts on what it holds (``GatedBroker.reconcile``, review R96)."""
        with self._lock:
            self._dirty = True
            self._save(self.clock())

    def holds(self, request_id: str) -> bool:
        """Whether ``request_id`` is a lease or a waiting request of the broker's, live or ended
        by the clock since the broker's last call (``is_live`` tells which). Changes nothing; an id
        that is not text names none."""
        with self._lock:
            return isinstance(request_id, str) and (request_id in self._leases or request_id in self._waiting)

    def undelivered(self) -> list[BrokerEvent]:
        """The events this broker caused that no call has returned yet, in order, which the next
        call that returns events returns: those of a ``renew`` (which returns the lease, not
        events: the expiries and grace ends its clock applied, the grants and notices its pass
        made), whether it returned or raised, and those of any call that raised after causing
        them (its journal write failed or was interrupted, its pass over the queue raised; a
        refused call's clock). Until a regression review (c) of R91 this said only the latter.
        Changes nothing. ``GatedBroker`` asks it whether the request its ``submit`` gave was taken
        and ended in that very call (withdrawn by ``grant_check``: the broker then holds it no
        more, but its event is still to be given out), whether a lease ``renew`` raised on was
        replaced in that call, and whether an id it is to decide has an end still to be given
        out."""
        with self._lock:
            return list(self._outbox)

    def is_live(self, request_id: str) -> bool:
        """Whether ``request_id`` is live at the clock's now: a lease neither expired nor past its
        notice deadline, or a waiting request whose wait is not over. A lease or a wait the clock
        has ended is not, though the broker holds it until a call applies the clock (then it ends
        with the events it would end with). Changes nothing, so that a caller may ask before it
        decides anything (``GatedBroker.submit`` does, before the Gate's decision); an id that
        is not text names none."""
        with self._lock:
            if not isinstance(request_id, str):
                return False
            now = self.clock()
            lease = self._leases.get(request_id)
            if lease is not None:
                # As ``_end_due_leases`` ends them: at the notice deadline or the expiry, inclusive.
                deadline = math.inf if lease.notice_deadline is None else lease.notice_deadline
                return min(lease.expires_at, deadline) > now
            waiting = self._waiting.get(request_id)
            return waiting is not None and waiting.deadline > now  # as ``_apply_time`` times it out

    def next_deadline(self) -> float | None:
        """The next clock time at which ``advance`` would change something by itself, if any: the
        clock's now when an expiry, a grace end or a timeout is due already (the clock moved on
        since the last call), or, while a request waits, when no call has tried the queue since
        ``end_due`` freed GPUs or ``restore`` queued it, or since a setting it is placed with
        changed (``locality_wait_s``, ``drain_after_s``, ``max_draining``, ``grace_s``,
        ``policy``), or since the last pass moved something (a grant, a nomination, a reservation
        given back) with a request still waiting ahead of that move, whose answer and wake were
        worked out before it (until a regression review of R90 it named that wake, or the
        request's timeout, though the move let it be placed or preempt sooner, even at once);
        the time a waiting request's answer may change though nothing else does (its
        locality wait or drain delay over, a lease no longer a preemption candidate for it);
        ``GRANT_CHECK_RETRY_S`` after the last call that tried the queue when ``grant_check``
        raised ``StoreError`` in it, or after a call whose pass over the queue, or whose grant of
        a nominated request as a lease ended, raised (``grant_check`` raising another error, or
        the placement policy raising), unless something comes sooner: the next call tries the
        whole queue again, and a driver sleeping until then does not call a check that keeps
        raising in a loop (until a regression review of R90 a pass that raised made it now, and
        a grant at a lease's end that raised left it at the next timer).

        It reads the first deadline and the first wake off the queue's heaps, not every waiting
        request (until review R90 it did: a driver calling it after each call, queuing n requests,
        took time in n squared), and the leases, one per GPU at most, as each call does."""
        with self._lock:
            now = self.clock()
            if self._waiting and self._tried_with != self._settings():
                return now
            due = [
                lease.expires_at
                if lease.notice_deadline is None
                else min(lease.expires_at, lease.notice_deadline)
                for lease in self._leases.values()
            ]
            # A request is tried again at its wake though nothing else changes (``_time_bound``,
            # ``_retry_at``): its locality wait or drain delay ends, or a preemption candidate's
            # grace no longer ends before its wait does, and it may now preempt another lease
            # (until review R90 not named: a driver sleeping until ``next_deadline`` reached the
            # request's timeout first). Each wake is ahead of the call that set it; one the clock
            # has passed since is due now, as an expiry is.
            due += (self._check_retry_at, self._waiting.first_deadline(), self._waiting.first_wake())
            times = [max(t, now) for t in due if math.isfinite(t)]
            return min(times) if times else None

    def leases(self) -> list[Lease]:
        """Live leases, oldest grant first."""
        with self._lock:
            return sorted(self._leases.values(), key=lambda lease: (lease.granted_at, lease.id))

    def queue(self) -> list[QueuedRequest]:
        """Waiting requests in the order the broker tries them."""
        with self._lock:
            gpus = self.topology.gpus
            return [
                QueuedRequest(
                    request=w.request,
                    submitted_at=w.submitted_at,
                    deadline=w.deadline,
                    nominated=tuple(gpus[i].id for i in w.nominated) if w.nominated else (),
                    victims=tuple(sorted(w.victims)) if w.victims else (),
                    draining=w.draining,
                )
                for w in self._waiting.ordered()
            ]

    def usage(self, tenant: str) -> int:
        """GPUs charged to ``tenant``'s quota: its live leases (less those being preempted)
        plus the GPUs reserved for its nominated requests. Raises ``BrokerError`` if unknown."""
        with self._lock:
            return self._quota.used(tenant)

    def free_gpus(self) -> int:
        """GPUs neither leased nor reserved for a nominated request."""
        with self._lock:
            return self._free.total

    def snapshot(self) -> BrokerSnapshot:
        """The whole state now."""
        with self._lock:
            return BrokerSnapshot(self.clock(), tuple(self.leases()), tuple(self.queue()))

    def restore(self, snapshot: BrokerSnapshot) -> None:
        """Take over the leases and queue of a saved snapshot (a restarted broker).

        Only on a broker that has done nothing yet. Leases keep their expiry and notice
        deadlines, so a lease whose holder died while the broker was down ends at the next call;
        one that ended by the clock's now and names a GPU this topology lacks (a node removed
        while the broker was down) is not restored (logged; review R96).
        The queue taken over is untried: ``next_deadline`` is now while a request waits, until a
        call tries it, which grants, after ``grant_check``, a nominated request whose victims are
        gone and a request that fits now (this cluster or these quotas larger than the snapshot's,
        or ``grant_check``'s store down when it was taken).
        The default clock (``SteadyWallClock``) is moved forward to the snapshot's time if it is
        behind it: time on a restored broker never runs back past what it saved.
        Raises ``BrokerError``, changing nothing, when the broker is not empty or the snapshot
        does not match this topology and these quotas (unknown GPU or tenant, a GPU held twice,
        a gang of the wrong size, a request draining with no GPUs nominated), names one lease or request id twice, or holds a time that is
        none, as the journal's ``load`` refuses it (a ``taken_at`` of no date from year 1 to 9999,
        a lease's or request's time that is not a finite number, a waiting request's ``deadline``
        that is neither a finite number nor ``inf``, which says it never times out), or has a
        field that is not of its type (``_check_snapshot_shapes``: a request that is no
        ``GangRequest``, GPUs or victims that are no tuple of ids...), all checked before
        anything is taken over.
        """
        with self._lock:
            if self._leases or self._waiting or self._seq:
                raise BrokerError("restore needs a broker that has done nothing yet")
            # Its fields and times checked before a lease is dropped, which reads its times; the
            # journal takes over the snapshot as given, which it compares with the state stored
            # (the regression review of R96: handed the copy without the dropped leases, it
            # found the stored state "written over" and refused every write).
            _check_snapshot_shapes(snapshot)
            self._check_snapshot_times(snapshot)
            kept = self._without_ended_on_unknown_gpus(snapshot, self.clock())
            self._check_snapshot(kept)
            if isinstance(self.clock, SteadyWallClock):  # an injected clock is the caller's to keep
                self.clock.not_before(kept.taken_at)
            self._restore_leases(kept.leases)
            self._restore_queue(kept.queue)
            self._dirty = True
            self._moves += 1
            if self.journal is not None:
                self.journal.take_over(snapshot)  # the broker it was restored from writes no more
            self._forget_ended_victims()
            # Untried: no call here tried it, and the old broker's answers (its settled pass, its
            # ``grant_check`` retry) were for its own cluster and quotas. Until review R90 only a
            # nominated request whose victims had ended made ``next_deadline`` now: one that fits
            # this larger cluster waited beside free GPUs until its locality wait or timeout.
            self._tried_with = None

    def _forget_ended_victims(self) -> None:
        """Forget the victims that ended while the broker was down: a nominated request whose
        victims all did is granted by the next call that tries the queue, under the rules of a
        live broker (not past its quota, nor once its wait is over) and after ``grant_check``,
        which a ``GatedBroker`` made after the restore sets: until review R89 it was granted here,
        before any check was set, so a request whose grant was revoked while the broker was down
        was granted all the same."""
        for w in self._waiting.values():
            w.victims &= set(self._leases)

    # --- validation ---------------------------------------------------------------------------

    def _check_placeable(self, request: GangRequest) -> None:
        try:
            ceiling = self._quota.ceiling(request.tenant)
        except BrokerError as exc:
            raise BrokerError(f"request {quoted(request.id)}: {exc}") from None
        n = request.gpus
        if n > ceiling:
            # A count or a quota of thousands of digits is quoted as shown_number says: an int past
            # 4,300 digits has no str() (ValueError), and a traceback is no answer to bad input.
            raise BrokerError(
                f"request {quoted(request.id)}: {shown_number(n)} GPUs exceed what tenant {quoted(request.tenant)} "
                f"may ever hold ({shown_number(ceiling)})"
            )
        eligible = eligibility(request, self.topology)
        constraint = request.topology
        if constraint is not None and constraint.required:
            groups = self.topology.members[constraint.level]
            largest = max(sum(1 for i in g if eligible is None or eligible(i)) for g in groups)
            if n > largest:
                raise BrokerError(
                    f"request {quoted(request.id)}: {shown_number(n)} GPUs never fit in one {constraint.level} "
                    f"(largest has {largest})"
                )
        else:
            count = len(self.topology) if eligible is None else sum(map(eligible, range(len(self.topology))))
            if n > count:
                raise BrokerError(
                    f"request {quoted(request.id)}: {shown_number(n)} GPUs but only {count} match its filters"
                )

    def _local_possible(self, request: GangRequest) -> bool:
        """Whether some group at a level ``request`` prefers (before the locality wait) could ever
        hold it whole. A gang larger than every NVLink domain can never be inside one: waiting
        for one would hold it back with the GPUs free (for ever with ``locality_wait_s=inf``), so
        it is placed as after the locality wait."""
        for level in levels_to_try(request, loosen=False):
            if level is None:
                return True
            constraint = None if request.topology is None else request.topology.level
            key = (level, request.gpu_type, request.min_memory_gb, constraint)
            largest = self._largest.get(key)
            if largest is None:
                eligible = eligibility(request, self.topology)
                allowed = nested(request, self.topology, level)
                largest = max(
                    (
                        sum(1 for i in members if eligible is None or eligible(i))
                        for g, members in enumerate(self.topology.members[level])
                        if allowed is None or allowed[g]
                    ),
                    default=0,
                )
                if len(self._largest) >= 1024:  # filters are the callers' to choose: keep it bounded
                    self._largest.clear()
                self._largest[key] = largest
            if largest >= request.gpus:
                return True
        return False

    def _ttl(self, request: GangRequest) -> float:
        return self.ttl_s if request.ttl_s is None else request.ttl_s

    # --- time -------------------------------------------------------------------------------

    def _apply_time(self, now: float) -> None:
        # Timeouts first: a lease that ends now grants a nominated request now, and one whose
        # wait is over would be granted past it (a gated lease past its grant's expiry).
        for w in self._waiting.timed_out(now):
            self._unqueue(w, TimedOut(w.request, w.deadline - w.submitted_at))
        self._end_due_leases(now)

    def _end_due_leases(self, now: float) -> None:
        # Again while an end makes another lease due (a victim notified with no grace).
        self._due = True
        while self._due:
            self._due = False
            for lease in list(self._leases.values()):
                if lease.notice_deadline is not None and lease.notice_deadline <= now:
                    self._end(lease.id, "preempted", now)
                elif lease.expires_at <= now:
                    self._end(lease.id, "expired", now)

    # --- scheduling ---------------------------------------------------------------------------

    def _schedule(self, now: float) -> None:
        self._unreadable = False
        self._place_waiting(now)
        # A victim notified with no grace (grace_s=0) ends now, not at some later call: its GPUs
        # go to its preemptor or the queue in this call. Each round ends a lease, so this stops.
        while self._due:
            self._end_due_leases(now)
            self._place_waiting(now)
        self._check_retry_at = now + GRANT_CHECK_RETRY_S if self._unreadable else math.inf
        self._save(now)

    def _place_waiting(self, now: float) -> None:
        """Try the waiting requests in order (``_try_placing``). A request that could not be placed
        against the broker's state, and changed nothing, gets the same answer while that state is
        the same, until a time that changes its answer (``_time_bound``, ``_retry_at``). So once a
        pass over the queue moved nothing (``_settled``), and until something moves, a pass tries
        only the requests new since then or whose time came (``_Queue.woken``), and every request
        after the first of them that moves something, as a pass over the whole queue would, with
        the same answers. Until review R89 each call tried the whole queue: queuing n requests
        that could not be placed was quadratic in n."""
        woken = self._waiting.woken(now)
        settings = self._settings()
        settled = self._settled == (self._moves, settings) and now >= self._settled_now
        self._settled = None  # until this pass is over: one that raises leaves the next to try all
        self._tried_with = settings
        moves = self._moves
        last_move: tuple[int, int] | None = None  # the rank of the last request that moved something
        try:
            for w in self._to_try(woken if settled else None, moves):
                before = self._moves
                self._retry_at = math.inf
                self._try_placing(w, now)
                if self._waiting.get(w.request.id) is w:
                    self._waiting.set_wake(w, min(self._retry_at, self._time_bound(w, now)))
                if self._moves != before:
                    last_move = w.rank
        except BaseException:
            self._raised(now)
            raise
        if self._moves == moves:
            self._settled, self._settled_now = (moves, settings), now
        elif last_move is not None and self._waiting.any_before(last_move):
            # A request ranked before the last move still waits: its answer, and its wake, were
            # worked out before that move, which may let it be placed or preempt, now or sooner
            # than its wake (a lease the move took, or freed, its candidate). The next call tries
            # the whole queue, as this pass did not settle; ``next_deadline`` says now until one
            # does (until a regression review of R90 it named that stale wake, or the request's
            # timeout, past the time ``advance`` placed it or preempted for it).
            self._tried_with = None

    def _raised(self, now: float) -> None:
        """Note that ``grant_check`` (an error other than ``StoreError``, which ``_may_take``
        catches) or the placement policy raised at ``now``, in a pass over the queue or as a
        lease's end made a nominated request ready (``_end``), the call raising it:
        ``next_deadline`` names ``GRANT_CHECK_RETRY_S`` later, unless something comes sooner, when
        a call tries the whole queue again (the pass did not settle, or the end moved something),
        not now (``GRANT_CHECK_RETRY_S``)."""
        self._check_retry_at = now + GRANT_CHECK_RETRY_S

    def _settings(self) -> tuple[object, ...]:
        """The settings a waiting request's answer depends on: a pass after one of them changed
        tries the whole queue (they are attributes a caller may set). Not ``grant_check``: it is
        asked only of a request about to take GPUs, so it holds back none that could not."""
        return (self.policy, self.locality_wait_s, self.drain_after_s, self.max_draining, self.grace_s)

    def _to_try(self, woken: list[_Waiting] | None, moves: int) -> Iterator[_Waiting]:
        """The requests a pass tries, in order: every one (``woken`` ``None``), or those of
        ``woken`` until one of them moves something (``_moves`` is no longer ``moves``), then
        every one after it."""
        if woken is None:
            yield from self._waiting.ordered()
            return
        last: _Waiting | None = None
        for w in woken:
            if self._moves != moves:
                break
            yield w
            last = w
        if last is not None and self._moves != moves:
            yield from self._waiting.after(last.rank)

    def _time_bound(self, w: _Waiting, now: float) -> float:
        """The first time after ``now`` at which waiting ``w`` may be placed otherwise with the
        broker's state unchanged: its locality wait ends (``_loosen``), or its drain delay does
        (``_try_drain``); ``inf`` if none."""
        bound = math.inf
        if not w.nominated or w.draining:
            loosen_at = w.submitted_at + self.locality_wait_s
            if loosen_at > now:
                bound = loosen_at
        if not w.nominated and self.max_draining:
            drain_at = w.submitted_at + self.drain_after_s
            if drain_at > now:
                bound = min(bound, drain_at)
        return bound

    def _try_placing(self, w: _Waiting, now: float) -> None:
        if w.nominated:
            # Granted as its last victim ends (``_end``), unless its quota held it back then:
            # it goes once the quota holds it, which another lease's end or a withdrawn
            # reservation may bring about, not only a notified lease's end.
            if self._ready(w):
                if self._may_take(w):
                    self._grant(w, w.nominated, now)
            elif w.draining:
                self._place_draining(w, now)
            return
        request = w.request
        loosen = self._loosen(w, now)
        if self._quota.fits(request.tenant, request.gpus):
            chosen = self.policy.place(request, self._free, loosen=loosen)
            if chosen is not None:
                if not self._quota.fits(request.tenant, request.gpus, with_leaving=True):
                    # It fits once the notified leases of its tenant or cohort are gone,
                    # which their grace bounds: it waits for them, preempting nobody.
                    return
                if not self._may_take(w):
                    return
                self._free.take(chosen)
                self._quota.charge(request.tenant, request.gpus)
                self._grant(w, chosen, now)
                return
        if not self._try_preempt(w, now, loosen) and now >= w.submitted_at + self.drain_after_s:
            self._try_drain(w)

    def _loosen(self, w: _Waiting, now: float) -> bool:
        """Whether ``w`` may be placed looser than it prefers (``PlacementPolicy.place``)."""
        # The waits end at the very sums ``next_deadline`` names: ``now - submitted_at >= wait``
        # can be false then (0.7 + 0.1 - 0.7 < 0.1), and until review R66 a driver advancing at
        # ``next_deadline`` found the wait not over, and no later deadline named it again.
        return now >= w.submitted_at + self.locality_wait_s or not self._local_possible(w.request)

    def _place_draining(self, w: _Waiting, now: float) -> None:
        """Grant draining ``w`` where it would be placed now were it not draining (its reserved GPUs
        that are free counted), if anywhere, its reservation going back: the group it drains waits
        on leases that may be renewed for as long as their holders run, while another group came
        free, or its locality wait ended (until review R51 it waited on its drained group, up to
        its timeout, with a whole domain free)."""
        request = w.request
        if not self._quota.fits(request.tenant, 0, with_leaving=True):
            return
        own = [i for i in w.nominated if self._owner[i] is None]
        if self._free.total + len(own) < request.gpus:
            return
        free = self._free.copy()  # with its own reserved GPUs that are free: they may be part of it
        free.give(own)
        chosen = self.policy.place(request, free, loosen=self._loosen(w, now))
        if chosen is None or not self._may_take(w):
            return
        self._withdraw_nominated(w)
        w.nominated = ()
        self._waiting.set_draining(w, False)
        self._free.take(chosen)
        self._quota.charge(request.tenant, request.gpus)
        self._grant(w, chosen, now)

    def _grant(self, w: _Waiting, gpus: Sequence[int], now: float) -> None:
        request = w.request
        del self._waiting[request.id]
        self._moves += 1
        for i in gpus:
            self._owner[i] = request.id
            self._reserved[i] = None
        lease = Lease(
            id=request.id,
            request=request,
            gpus=tuple(self.topology.gpus[i].id for i in gpus),
            granted_at=now,
            expires_at=now + self._ttl(request),
            level=self.topology.shared_level(gpus),
        )
        self._leases[request.id] = lease
        self._dirty = True
        self._due = self._due or lease.expires_at <= now
        self._outbox.append(Granted(lease))

    def _end(self, lease_id: str, reason: EndReason, now: float) -> None:
        lease = self._leases.pop(lease_id)
        self._dirty = True
        self._moves += 1
        nums = [self.topology.number(g) for g in lease.gpus]
        was_leaving = lease_id in self._victims
        if was_leaving:
            self._victims.discard(lease_id)
            self._quota.leave(lease.tenant, -len(nums))
        else:
            self._quota.charge(lease.tenant, -len(nums))
        for i in nums:
            self._owner[i] = None
        self._free.give(i for i in nums if self._reserved[i] is None)
        self._outbox.append(LeaseEnded(lease, reason, now))
        waiting_on = {self._reserved[i] for i in nums} | {lease.preempted_by}
        nominated = [
            self._waiting[r] for r in sorted(r for r in waiting_on if r is not None and r in self._waiting)
        ]
        for w in nominated:
            w.victims.discard(lease_id)
        if was_leaving:
            # GPUs that were leaving are gone: a nominated request held back by its quota may go.
            nominated = sorted((w for w in self._waiting.values() if w.nominated), key=lambda w: w.seq)
        try:
            for w in nominated:
                if self._ready(w) and self._may_take(w):
                    self._grant(w, w.nominated, now)
        except BaseException:
            # As from a pass: the request waits nominated beside its free GPUs, and until a
            # regression review of R90 ``next_deadline`` named its next timer (a preemption
            # candidate dropping out, its timeout), which a driver sleeping until then slept to.
            self._raised(now)
            raise

    def _ready(self, w: _Waiting) -> bool:
        """Whether nominated ``w`` may be granted: its victims have ended, its GPUs are free, and
        its tenant's quota holds it with the GPUs of notified leases counted. Those are still held
        until their grace ends (a tenant preempting its own lease while another of its leases was
        being reclaimed held both, past its quota, for the rest of that grace)."""
        return (
            not w.victims
            and all(self._owner[i] is None for i in w.nominated)
            and self._quota.fits(w.request.tenant, 0, with_leaving=True)
        )

    def _may_take(self, w: _Waiting) -> bool:
        """Whether waiting ``w`` may take GPUs now, as ``grant_check`` answers (``True`` without
        one); asked only when it is about to, so a check that reads a store costs one read per
        grant, not one per call and request waiting. Refused, ``w`` is withdrawn: ``Withdrawn``
        with the reason, a reservation it held going back, victims it notified staying notified
        (as at a timeout). A ``StoreError`` of the check leaves it waiting as it was, asked again at
        the next call, and ``next_deadline`` names ``GRANT_CHECK_RETRY_S`` after this call: until a
        regression review of R89 a driver sleeping until ``next_deadline`` left free GPUs idle
        beside it until its next timer, and until a third one it said now, and such a driver
        read the store in a loop for as long as it was down."""
        if self.grant_check is None:
            return True
        try:
            refused = self.grant_check(w.request)
        except StoreError:
            self._unreadable = True
            self._retry_at = -math.inf  # asked again at the next call's pass, as if nothing else moved
            return False
        if refused is None:
            return True
        self._unqueue(w, Withdrawn(w.request, refused))
        return False

    def _unqueue(self, w: _Waiting, event: TimedOut | Withdrawn) -> None:
        """Take waiting ``w`` out of the queue, unplaced (released, timed out or refused by
        ``grant_check``): a reservation it held goes back, and ``event`` says why."""
        del self._waiting[w.request.id]
        if w.nominated:
            self._withdraw_nominated(w)
        self._dirty = True
        self._outbox.append(event)

    def _withdraw_nominated(self, w: _Waiting) -> None:
        # Victims already notified stay notified: their holders were told to checkpoint, and
        # un-telling them would race with a checkpoint in progress.
        self._moves += 1
        self._quota.charge(w.request.tenant, -w.request.gpus)
        unowned = [i for i in w.nominated if self._owner[i] is None]
        for i in w.nominated:
            self._reserved[i] = None
        self._free.give(unowned)

    # --- output -------------------------------------------------------------------------------

    def _drain(self) -> list[BrokerEvent]:
        """The events since the last call that returned some, taken out of the outbox and put in
        ``sink`` too. No call comes between the two (where CPython would handle a pending
        signal): each event is in one of them whatever is raised."""
        events, self._outbox = self._outbox, []
        if self.sink is not None:
            self.sink.extend(events)
        return events

    def _save(self, now: float) -> None:
        if self.journal is not None and self._dirty:
            self.journal.save(BrokerSnapshot(now, tuple(self.leases()), tuple(self.queue())))
        self._dirty = False


def _bounded_wait(request: GangRequest, wait_s: object) -> float:
    """How long ``request`` may wait given the bound ``wait_s`` of ``Broker.submit``: the shorter
    of the two. Raises ``BrokerError`` for a bound that is not a number >= 0 or ``inf``: NaN
    would leave ``min`` to keep ``timeout_s``, a bool or text is no time, and an integer too large
    for a float would fail the sum that makes the deadline."""
    if is_number(wait_s) and wait_s >= 0 and (finite(wait_s) or wait_s == math.inf):
        return min(request.timeout_s, wait_s)
    raise BrokerError(
        f"request {quoted(request.id)}: wait_s must be a number >= 0 or inf, got {shown_number(wait_s)}"
    )


def _an_id(lease_id: object) -> None:
    """Raise ``LeaseLost`` for a lease id that is not text: no lease has it (a list was a
    ``TypeError`` out of ``release`` and ``renew``, unhashable, until review R60)."""
    if not isinstance(lease_id, str):
        raise LeaseLost(f"lease {quoted(lease_id)} is not held: a lease id is text")
