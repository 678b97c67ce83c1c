"""How a restarted broker takes over a saved snapshot (``_Restoring``, a part of ``Broker``): the
snapshot checked against this topology and these quotas, then its leases and queue taken over,
GPUs, reservations and quota charges included. ``Broker.restore`` calls them in that order."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from typing import get_args

from agentgate.dispatch.broker._model import (
    LEASE_TIMES,
    BrokerSnapshot,
    GangRequest,
    Lease,
    PreemptReason,
    QueuedRequest,
    queued_deadline_refused,
    shown_number,
    taken_at_refused,
    time_refused,
)
from agentgate.dispatch.broker._placement import FreeIndex
from agentgate.dispatch.broker._quota import QuotaBook
from agentgate.dispatch.broker._quoting import quoted
from agentgate.dispatch.broker._topology import LEVELS, Topology
from agentgate.dispatch.broker._waiting import _Queue, _Waiting
from agentgate.errors import BrokerError

_log = logging.getLogger("agentgate.broker")


class _Restoring:
    """``Broker``'s snapshot checks and take-over (module docstring)."""

    # The broker's state this part reads and sets (``Broker.__init__`` sets it).
    topology: Topology
    _quota: QuotaBook
    _free: FreeIndex
    _owner: list[str | None]
    _reserved: list[str | None]
    _leases: dict[str, Lease]
    _victims: set[str]
    _waiting: _Queue
    _seq: int

    def _check_snapshot(self, snapshot: BrokerSnapshot) -> None:
        """Raise ``BrokerError`` unless ``snapshot`` fits this topology and these quotas: each id
        live once, each lease granting its own request, known tenants and GPUs, no GPU held or
        nominated twice, gangs of their request's size, no request draining with no GPUs
        nominated. Its fields' types (``_check_snapshot_shapes``) and its times
        (``_check_snapshot_times``, as the journal's ``load`` reads them) are checked before, by
        ``restore``."""
        holders: dict[int, str] = {}
        reserved: dict[int, str] = {}
        for lease in snapshot.leases:
            # First: a request's id is text (``GangRequest``), so each id below is hashable (until
            # review R85 a lease id that was a list was a ``TypeError`` here).
            if lease.id != lease.request.id:
                raise BrokerError(
                    f"snapshot: lease {quoted(lease.id)} grants request {quoted(lease.request.id)}"
                )
        ids = [lease.id for lease in snapshot.leases] + [q.request.id for q in snapshot.queue]
        if len(set(ids)) != len(ids):
            # Counted once, then the first id with a repeat: ``ids.count`` per id was quadratic
            # (20,000 requests, their repeat last: 3 s).
            times = Counter(ids)
            twice = next(i for i in ids if times[i] > 1)
            raise BrokerError(f"snapshot: names {quoted(twice)} twice (a lease or request id is live once)")
        for lease in snapshot.leases:
            if lease.tenant not in self._quota:
                raise BrokerError(
                    f"snapshot: lease {quoted(lease.id)} has unknown tenant {quoted(lease.tenant)}"
                )
            self._claim_snapshot_gpus(lease.id, lease.gpus, lease.request.gpus, holders, may_be_none=False)
        for q in snapshot.queue:
            if q.request.tenant not in self._quota:
                raise BrokerError(
                    f"snapshot: request {quoted(q.request.id)} has unknown tenant {quoted(q.request.tenant)}"
                )
            self._claim_snapshot_gpus(q.request.id, q.nominated, q.request.gpus, reserved, may_be_none=True)
            if q.draining and not q.nominated:
                # A draining request reserves its whole group (``_Preempting._try_drain``): one
                # reserving none held a ``max_draining`` slot for its whole wait, so no gang
                # drained, while it drained nothing (taken until review R90).
                raise BrokerError(
                    f"snapshot: request {quoted(q.request.id)} drains with no nominated GPUs "
                    "(a draining request reserves its whole gang)"
                )

    def _check_snapshot_times(self, snapshot: BrokerSnapshot) -> None:
        """Raise ``BrokerError`` naming the first time of ``snapshot`` that is none. Until review
        R85 restore checked none: a ``taken_at`` of ``1e300`` moved the default clock there, and a
        lease whose ``expires_at`` was NaN was restored, never expired, and failed every write of
        the journal."""
        if (why := taken_at_refused(snapshot.taken_at)) is not None:
            raise BrokerError(f"snapshot: {why}")
        for lease in snapshot.leases:
            for name in LEASE_TIMES:
                if (why := time_refused(name, getattr(lease, name))) is not None:
                    raise BrokerError(f"snapshot: lease {quoted(lease.id)}: {why}")
        for q in snapshot.queue:
            why = time_refused("submitted_at", q.submitted_at) or queued_deadline_refused(q.deadline)
            if why is not None:
                raise BrokerError(f"snapshot: request {quoted(q.request.id)}: {why}")

    def _without_ended_on_unknown_gpus(self, snapshot: BrokerSnapshot, now: float) -> BrokerSnapshot:
        """``snapshot`` less its leases that ended by ``now`` (their expiry or notice deadline
        passed) and name a GPU this topology lacks: a node taken out of the inventory while the
        broker was down (review R96: until then such a lease, long expired, made ``restore``
        refuse the whole state, and no broker without that node could start). Each is logged as
        a warning of ``agentgate.broker``; a ``GatedBroker``'s ``reconcile`` ends its decision as
        ``lease_lost``. A lease still live on an unknown GPU is refused as before."""
        kept = []
        for lease in snapshot.leases:
            ends = (
                lease.expires_at
                if lease.notice_deadline is None
                else min(lease.expires_at, lease.notice_deadline)
            )
            unknown = [g for g in lease.gpus if g not in self.topology.index]
            if unknown and ends <= now:  # its times are finite: ``restore`` checked them first
                _log.warning(
                    "restore: lease %s ended before the restart and names unknown gpu %s: not restored",
                    quoted(lease.id),
                    quoted(unknown[0]),
                )
                continue
            kept.append(lease)
        return (
            snapshot
            if len(kept) == len(snapshot.leases)
            else dataclasses.replace(snapshot, leases=tuple(kept))
        )

    def _claim_snapshot_gpus(
        self, owner: str, gpus: Sequence[str], size: int, into: dict[int, str], *, may_be_none: bool
    ) -> None:
        """Record in ``into`` that ``owner`` holds ``gpus``: a whole gang of ``size``, or none where
        ``may_be_none`` (a waiting request that is not nominated; a lease always holds its gang:
        until review R89 one holding none was restored, charged nothing, and its tenant was granted
        its quota again beside it); raise ``BrokerError`` for a gang of another size, a GPU this
        topology lacks or one ``into`` has already."""
        if len(gpus) != size and not (may_be_none and not gpus):
            raise BrokerError(
                f"snapshot: {quoted(owner)} holds {len(gpus)} GPUs for a gang of {shown_number(size)}"
            )
        for gpu in gpus:
            if gpu not in self.topology.index:
                raise BrokerError(f"snapshot: {quoted(owner)} names unknown gpu {quoted(gpu)}")
            i = self.topology.index[gpu]
            if i in into:
                raise BrokerError(
                    f"snapshot: gpu {quoted(gpu)} is held by {quoted(into[i])} and {quoted(owner)}"
                )
            into[i] = owner

    def _restore_leases(self, leases: Sequence[Lease]) -> None:
        """Take the GPUs of checked ``leases`` and charge their tenants; a lease under notice
        counts as a victim, no longer against its tenant's quota."""
        for lease in leases:
            nums = [self.topology.index[g] for g in lease.gpus]
            for i in nums:
                self._owner[i] = lease.id
            self._free.take(nums)
            self._leases[lease.id] = lease
            if lease.notice_deadline is not None:
                self._victims.add(lease.id)
                self._quota.leave(lease.tenant, len(nums))
            else:
                self._quota.charge(lease.tenant, len(nums))

    def _restore_queue(self, queue: Sequence[QueuedRequest]) -> None:
        """Queue the checked requests in their saved order, reserving the GPUs nominated for them."""
        for q in queue:
            self._seq += 1
            nums = [self.topology.index[g] for g in q.nominated]
            # Journals written before review R36 saved a nominated request's deadline as inf.
            deadline = min(q.deadline, q.submitted_at + q.request.timeout_s)
            w = _Waiting(q.request, q.submitted_at, deadline, self._seq, tuple(nums), set(q.victims))
            w.draining = q.draining  # before it is queued, which counts it (``_Queue.draining``)
            self._waiting[q.request.id] = w
            if nums:
                self._quota.charge(q.request.tenant, len(nums))
                self._free.take(i for i in nums if self._owner[i] is None)
                for i in nums:
                    self._reserved[i] = q.request.id


def _check_snapshot_shapes(snapshot: object) -> None:
    """Raise ``BrokerError`` naming the first field of ``snapshot`` that is not of its type: a
    ``BrokerSnapshot`` of tuples of ``Lease`` and ``QueuedRequest``, each with a ``GangRequest``,
    its GPUs, nominated GPUs and victims tuples of ids (text), a lease's ``preempted_by`` an id or
    ``None``, its ``preempt_reason`` and ``level`` one of theirs or ``None``, a request's
    ``draining`` a bool (its times are ``_check_snapshot_times``'s). Checked before anything else:
    until review R89 a request, GPUs or nominated GPUs of ``None``, a GPU or a victim that was a
    list, or a queue item that was no ``QueuedRequest`` was a ``TypeError`` or an
    ``AttributeError``, and a victim that was a list one after the snapshot's leases were taken
    over, which left the broker holding them and refusing the right snapshot as "not empty"."""
    if not isinstance(snapshot, BrokerSnapshot):
        raise BrokerError(f"snapshot must be a BrokerSnapshot, got {quoted(snapshot)}")
    for name in ("leases", "queue"):
        if not isinstance(getattr(snapshot, name), tuple):
            raise BrokerError(f"snapshot: its {name} must be a tuple, got {quoted(getattr(snapshot, name))}")
    for n, lease in enumerate(snapshot.leases):
        if not isinstance(lease, Lease):
            raise BrokerError(f"snapshot: leases[{n}] must be a Lease, got {quoted(lease)}")
        why = (
            _request_refused(lease.request)
            or _ids_refused("gpus", lease.gpus)
            or _one_of_refused("preempt_reason", lease.preempt_reason, get_args(PreemptReason))
            or _one_of_refused("level", lease.level, LEVELS)
        )
        if why is None and lease.preempted_by is not None and not isinstance(lease.preempted_by, str):
            why = f"preempted_by must be a request id or None, got {quoted(lease.preempted_by)}"
        if why is not None:
            raise BrokerError(f"snapshot: lease {quoted(lease.id)}: {why}")
    for n, q in enumerate(snapshot.queue):
        if not isinstance(q, QueuedRequest):
            raise BrokerError(f"snapshot: queue[{n}] must be a QueuedRequest, got {quoted(q)}")
        why = (
            _request_refused(q.request)
            or _ids_refused("nominated", q.nominated)
            or _ids_refused("victims", q.victims)
        )
        if why is None and not isinstance(q.draining, bool):
            why = f"draining must be True or False, got {quoted(q.draining)}"
        if why is not None:
            whose = f"request {quoted(q.request.id)}" if isinstance(q.request, GangRequest) else f"queue[{n}]"
            raise BrokerError(f"snapshot: {whose}: {why}")


def _request_refused(request: object) -> str | None:
    """Why ``request`` is no snapshot item's request, or ``None`` when it is a ``GangRequest``."""
    if isinstance(request, GangRequest):
        return None
    return f"request must be a GangRequest, got {quoted(request)}"


def _ids_refused(name: str, ids: object) -> str | None:
    """Why ``ids``, the field ``name``, is no tuple of ids (text), or ``None`` when it is one."""
    if isinstance(ids, tuple) and all(isinstance(i, str) for i in ids):
        return None
    return f"{name} must be a tuple of ids (text), got {quoted(ids)}"


def _one_of_refused(name: str, value: object, allowed: tuple[str, ...]) -> str | None:
    """Why ``value``, the field ``name``, is neither ``None`` nor one of ``allowed``."""
    if value is None or (isinstance(value, str) and value in allowed):
        return None
    return f"{name} must be one of {', '.join(allowed)} or None, got {quoted(value)}"
