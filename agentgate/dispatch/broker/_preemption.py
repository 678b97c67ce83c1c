"""Preemption and draining (``_Preempting``, a part of ``Broker``; the rules are the ``Broker``
module's docstring): the victims a waiting gang may preempt and the fewest of them that let it
fit, the group a draining gang reserves, and the nomination that reserves a placement, notifies
the victims and moves their GPUs from their tenants' charge to leaving."""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentgate.dispatch.broker._model import BrokerEvent, CheckpointNotice, GangRequest, Lease, PreemptReason
from agentgate.dispatch.broker._placement import (
    FreeIndex,
    PlacementPolicy,
    could_hold,
    eligibility,
    levels_to_try,
    nested,
)
from agentgate.dispatch.broker._quota import QuotaBook
from agentgate.dispatch.broker._topology import Topology
from agentgate.dispatch.broker._waiting import _Queue, _Waiting


class _Preempting:
    """``Broker``'s choice of victims, draining and nomination (module docstring)."""

    # The broker's state this part reads and sets (``Broker.__init__`` sets it).
    topology: Topology
    policy: PlacementPolicy
    grace_s: float
    max_draining: int
    _quota: QuotaBook
    _free: FreeIndex
    _owner: list[str | None]
    _reserved: list[str | None]
    _leases: dict[str, Lease]
    _victims: set[str]
    _waiting: _Queue
    _outbox: list[BrokerEvent]
    _dirty: bool
    _due: bool
    _moves: int
    _retry_at: float

    if TYPE_CHECKING:  # what this part calls of the broker's other parts

        def _may_take(self, w: _Waiting) -> bool: ...

    def _grace(self, request: GangRequest) -> float:
        return self.grace_s if request.grace_s is None else request.grace_s

    def _candidates(self, w: _Waiting, now: float) -> list[tuple[Lease, PreemptReason]]:
        request = w.request
        found: list[tuple[Lease, PreemptReason]] = []
        for lease in self._leases.values():
            # A lease whose grace would last as long as the request's wait, or longer, is no
            # victim: the request would time out before it is sure to get the GPUs, and the
            # checkpoint be for nobody. A grace that ends as the wait does is too long, since a
            # call applies timeouts before grace ends (``_apply_time``; until review R66 such a
            # victim was ended as its preemptor timed out), unless there is none: that victim
            # ends, and its preemptor is granted, in this very call.
            grace_end = now + self._grace(lease.request)
            if lease.id in self._victims or grace_end > w.deadline or now < grace_end == w.deadline:
                continue
            if lease.tenant == request.tenant:
                if lease.priority < request.priority:
                    found.append((lease, "priority"))
            elif self._quota.may_reclaim_from(request.tenant, request.gpus, lease.tenant):
                found.append((lease, "reclaim"))
        # No candidate any more once its grace would outlast the wait: the request is tried again
        # then (``Broker._place_waiting``), with fewer candidates, which may let it fit (a reclaim
        # skipped for an earlier victim of the same lender). The longest grace is the first to.
        longest = max((self._grace(lease.request) for lease, _ in found), default=0.0)
        if longest > 0:
            self._retry_at = min(self._retry_at, first_time_reaching(w.deadline, longest))
        # Borrowed capacity first, then the least important, then the newest (least work lost).
        found.sort(key=lambda c: (c[1] != "reclaim", c[0].priority, -c[0].granted_at, c[0].id))
        return found

    def _given_back(self, request: GangRequest, victims: Iterable[tuple[Lease, PreemptReason]]) -> list[int]:
        """The GPUs ``victims`` would give back that ``request`` may use: those that pass its filters
        (a placement takes no other) and that no draining gang reserved (those stay out of reach
        even when their lease ends)."""
        eligible, index, reserved = eligibility(request, self.topology), self.topology.index, self._reserved
        nums = [index[g] for lease, _ in victims for g in lease.gpus]
        return [i for i in nums if reserved[i] is None and (eligible is None or eligible(i))]

    def _what_if(
        self, request: GangRequest, victims: Iterable[tuple[Lease, PreemptReason]], loosen: bool
    ) -> list[int] | None:
        """The placement ``request`` would get, and fit its quota, were ``victims`` gone."""
        victims = list(victims)
        released: dict[str, int] = {}
        for lease, _ in victims:
            released[lease.tenant] = released.get(lease.tenant, 0) + len(lease.gpus)
        if not self._quota.fits(request.tenant, request.gpus, released):
            return None
        trial = self._free.copy()
        trial.give(self._given_back(request, victims))
        return self.policy.place(request, trial, loosen=loosen)

    def _try_preempt(self, w: _Waiting, now: float, loosen: bool) -> bool:
        """Nominate ``w`` with the fewest victims that let it fit; whether it did (or would have,
        where ``Broker.grant_check`` withdrew it or held it back instead)."""
        request = w.request
        candidates = self._candidates(w, now)
        if not candidates:
            return False
        usable: list[tuple[Lease, PreemptReason]] = []
        borrowed = {lease.tenant: self._quota.borrowed(lease.tenant) for lease, _ in candidates}
        for lease, reason in candidates:
            # Reclaim only while the lender's tenant is still borrowing after earlier victims.
            if reason == "reclaim" and borrowed[lease.tenant] <= 0:
                continue
            usable.append((lease, reason))
            borrowed[lease.tenant] -= len(lease.gpus)
        # Counted first: a gang that even all of them would not give enough GPUs it may use (in
        # one group, where it must stay inside one) is answered without a trial. Until review R94
        # each such try copied the free index and gave back every candidate's GPUs, of any type:
        # with 300 gangs waiting for A100s behind H100 candidates, a release on 10,000 GPUs took
        # 2.9 s under the broker's lock.
        if not could_hold(self.policy, request, self._free, self._given_back(request, usable), loosen=loosen):
            return False
        # All of them first: a gang that even they would not let fit is answered with one trial,
        # not one per candidate (each copies the free index: a gang waiting in vain on 1,000
        # GPUs made every call of the broker take 0.6 s, quadratic in the GPUs, until review R51).
        # The shortest prefix of the candidates that lets the gang fit, found by bisection: more
        # victims only free more GPUs and quota, so a prefix that fits stays fitting when it
        # grows. (Until review R52 each prefix was tried in turn, each trial a copy of the free
        # index: in a layout where a whole node frees only after most candidates, 4,000 GPUs
        # took a minute.) ``placement`` is always that of ``usable[:fits]``.
        placement = self._what_if(request, usable, loosen)
        if placement is None:
            return False
        short, fits = 0, len(usable)  # usable[:short] does not fit (0: not tried), usable[:fits] does
        while fits - short > 1:
            middle = (short + fits) // 2
            trial = self._what_if(request, usable[:middle], loosen)
            if trial is None:
                short = middle
            else:
                fits, placement = middle, trial
        chosen = usable[:fits]
        assert placement is not None  # the whole list fits, and each narrowing kept a prefix that does
        # Only the victims that hold GPUs of the placement are needed, unless the quota needs the
        # others gone too: tried once as a whole, so that what the loop below tries is at most
        # the gang's size, not every victim of a long prefix.
        taken = set(placement)
        holding = [c for c in chosen if any(self.topology.number(g) in taken for g in c[0].gpus)]
        if len(holding) < len(chosen) and (again := self._what_if(request, holding, loosen)) is not None:
            chosen, placement = holding, again
        # Minimize: drop any victim (newest choice first) the gang can do without.
        for victim in list(reversed(chosen[:-1])):
            fewer = [c for c in chosen if c is not victim]
            again = self._what_if(request, fewer, loosen)
            if again is not None:
                chosen, placement = fewer, again
        # Asked before any lease is told to checkpoint: a request that may no longer take GPUs
        # (its grant revoked, ``Broker.grant_check``) preempts nobody.
        if self._may_take(w):
            self._nominate(w, placement, chosen, now)
        return True

    def _try_drain(self, w: _Waiting) -> None:
        """Reserve for ``w`` the group at its innermost level that is closest to holding it."""
        request = w.request
        levels = [level for level in levels_to_try(request, loosen=False) if level is not None]
        if (
            not levels
            or request.gpus < 2
            or not self._quota.fits(request.tenant, request.gpus, with_leaving=True)
        ):
            return
        # Counted as requests come, go and drain (``_Queue.draining``): until a regression review
        # of R89 each try counted them over the whole queue, and a pass over n requests whose
        # drain delay was over took time in n squared.
        if self._waiting.draining >= self.max_draining:
            return
        # The innermost level with a group inside one group of the constraint's level.
        level, allowed = next(
            (lv, ok) for lv in levels if (ok := nested(request, self.topology, lv)) is None or any(ok)
        )
        eligible = eligibility(request, self.topology)
        best: tuple[int, int, list[int]] | None = None
        for g, members in enumerate(self.topology.members[level]):
            if allowed is not None and not allowed[g]:
                continue
            usable = [i for i in members if self._reserved[i] is None and (eligible is None or eligible(i))]
            if len(usable) < request.gpus:
                continue
            free = [i for i in usable if self._owner[i] is None]
            # Free GPUs first, then those of the oldest leases.
            busy = sorted((i for i in usable if self._owner[i] is not None), key=self._lease_age_key)
            key = (-len(free), g, (free + busy)[: request.gpus])
            if best is None or key[:2] < best[:2]:
                best = key
        if best is None or not self._may_take(w):
            return
        self._waiting.set_draining(w, True)
        self._reserve(w, best[2])

    def _lease_age_key(self, gpu: int) -> tuple[float, int]:
        owner = self._owner[gpu]
        return (self._leases[owner].granted_at if owner is not None else 0.0, gpu)

    def _reserve(self, w: _Waiting, placement: list[int]) -> None:
        """Nominate ``placement`` for ``w``: its tenant's quota is charged, its free GPUs taken
        out of the free index, and every GPU of it reserved for ``w`` (busy ones until their
        leases end)."""
        request = w.request
        self._dirty = True
        self._moves += 1
        w.nominated = tuple(placement)
        self._quota.charge(request.tenant, request.gpus)
        self._free.take(i for i in placement if self._owner[i] is None)
        for i in placement:
            self._reserved[i] = request.id

    def _nominate(
        self, w: _Waiting, placement: list[int], victims: list[tuple[Lease, PreemptReason]], now: float
    ) -> None:
        request = w.request
        self._reserve(w, placement)
        for lease, reason in victims:
            grace = self._grace(lease.request)
            notified = dataclasses.replace(
                lease, notice_deadline=now + grace, preempted_by=request.id, preempt_reason=reason
            )
            self._leases[lease.id] = notified
            self._victims.add(lease.id)
            self._quota.charge(lease.tenant, -len(lease.gpus))
            self._quota.leave(lease.tenant, len(lease.gpus))
            w.victims.add(lease.id)
            self._due = self._due or grace <= 0
            self._outbox.append(CheckpointNotice(notified, now + grace, request.id, reason))


def first_time_reaching(deadline: float, grace: float) -> float:
    """The first float time ``t`` at which ``t + grace >= deadline`` as floats add: from then on a
    lease with ``grace`` (> 0, finite) is no preemption candidate for a request waiting until
    ``deadline`` (``_Preempting._candidates``). Not ``deadline - grace``: the sum rounds, and
    until a regression review of R89 a candidate dropped one ulp before that difference (deadline
    302, grace 200: at 101.99999999999999 the sum is 302.0) left the request untried at that call,
    where a pass over the whole queue preempted for it."""
    if deadline == math.inf:
        return deadline
    t = deadline - grace
    for _ in range(4):  # the difference is within an ulp or two, unless grace dwarfs ``t``
        if t + grace < deadline:
            t = math.nextafter(t, math.inf)
        elif (below := math.nextafter(t, -math.inf)) + grace >= deadline:
            t = below
        else:
            return t
    # Else by bisection over the floats in order (near 0, below 1e-5 with a grace of 300, there
    # are millions of floats per ulp of the sum): -inf does not reach ``deadline``, ``deadline`` does.
    low, high = _float_rank(-math.inf), _float_rank(deadline)
    while high - low > 1:
        middle = (low + high) // 2
        if _ranked_float(middle) + grace >= deadline:
            high = middle
        else:
            low = middle
    return _ranked_float(high)


def _float_rank(x: float) -> int:
    """An integer that orders floats (not NaN) as their values do, adjacent floats adjacent."""
    bits: int = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits if bits >= 0 else -(bits & 0x7FFF_FFFF_FFFF_FFFF)


def _ranked_float(rank: int) -> float:
    """The float of ``_float_rank`` ``rank``."""
    bits = rank if rank >= 0 else -rank | -0x8000_0000_0000_0000
    value: float = struct.unpack("<d", struct.pack("<q", bits))[0]
    return value
