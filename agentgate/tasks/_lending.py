"""How a nested call borrows a slot of its ancestor (``_Lending``, a part of ``SharedLimits``).

Nested calls (a call made while a tool of these limits runs: ``RUNNING`` names the running
attempt's ``Waiter``, in the caller's context) never wait for a slot their own ancestor holds:
the ancestor is waiting for them, so that wait could never end. A nested call blocked on a full
limit (global, tool, tenant, principal) that an ancestor holds a slot of borrows that slot
(``Waiter.borrowed``; the lender's ``lent``) instead of waiting: it runs under its parent's
slot, one borrower per slot at a time, so siblings are still limited. A borrowed slot goes back
to its lender when the borrower finishes; a lender that finishes first hands the slot on to the
borrower, which then holds it as its own, so the counts never fall below what is running.

A nested call that has to wait queues at the most urgent priority class of itself, its
ancestors of these limits, and the calls waiting for a slot of a tool those ancestors run
(``_inherited_priority``; ``lend_priority`` when such a call queues after it): its ancestors hold
their slots while they wait for it, so it waiting at a less urgent rank than theirs, or than a
call waiting for their slots, would hold those behind every call of the ranks between (priority
inversion: until review R67 an urgent call waiting for the tool slot of a low-class call whose
tool waited for a nested call waited behind every call of the classes between to the nested
call's tool, under a steady load of them until its deadline). Only tool slots are followed: a
call waiting for a global, tenant or agent slot is not (any running call may hold it). What is
lent is taken back when the lender stops waiting (``take_back``), and an ancestor counts at its
``urgency``, raised by calls joined to it (``reclass_nested``): review R68.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentgate.tasks._call import ToolCall
from agentgate.tasks._config import PriorityClass, SchedulerConfig, TenantShare, ToolLimits
from agentgate.tasks._fair import FairQueue
from agentgate.tasks._token_bucket import TokenBucket
from agentgate.tasks._waiter import Waiter

#: What ``dict.pop`` returns for a key it does not hold (the dicts of waiters hold None).
_ABSENT = object()

#: The limits a slot counts against, in the order they are checked.
_DIMENSIONS = ("global", "tool", "tenant", "principal")


def _dimension_key(call: ToolCall, dimension: str) -> object:
    """Which slot of ``dimension`` a call of ``call`` counts against (two calls share it when equal)."""
    if dimension == "tool":
        return call.tool
    if dimension == "tenant":
        return call.tenant
    if dimension == "principal":
        return (call.tenant, call.agent_key)
    return None


class _Lending:
    """Which ancestors' slots a nested call borrows (``_borrow_plan``, used by
    ``SharedLimits.start_nested``), the start of queued nested calls once an ancestor can lend, and
    the counting of borrowed and lent slots when an attempt starts and finishes (all with the
    limits' ``lock`` held)."""

    # The limits' state this part reads and counts in (``SharedLimits.__init__`` sets it).
    config: SchedulerConfig
    queue: FairQueue[Waiter]
    in_flight: int
    tool_in_flight: dict[str, int]
    tenant_in_flight: dict[str, int]
    principal_in_flight: dict[tuple[str, str], int]
    per_tool_only: bool
    nested_waiting: dict[Waiter, int]
    nested_under: dict[Waiter, dict[Waiter, None]]
    nested_under_tool: dict[str, dict[Waiter, None]]
    nested_by: dict[tuple[str, object], dict[Waiter, None]]
    lifted: dict[Waiter, None]
    shares: dict[str, TenantShare]

    if TYPE_CHECKING:  # what this part calls of the limits' other parts

        def start(self, waiter: Waiter) -> None: ...

        def _bucket(self, tool: str, limits: ToolLimits) -> TokenBucket: ...

        def _tenant_blocked(self, tenant: str) -> bool: ...

        def _agent_blocked(self, tenant: str, principal: str) -> bool: ...

        @staticmethod
        def _wake(waiter: Waiter) -> bool: ...

        def _arm(self, at: float) -> None: ...

        def _dropped(self, waiter: Waiter) -> None: ...

    def _inherited_priority(
        self, priority: PriorityClass, parent: Waiter, waiter: Waiter | None = None
    ) -> tuple[PriorityClass, bool]:
        """The class a nested call made under ``parent`` queues at: ``priority``, or the class of
        the most urgent ancestor of these limits (its ``urgency``: raised by calls joined to it),
        or of the most urgent call queued for a full tool an ancestor runs, when its rank comes
        first; and whether it is the last (lent by a waiting call: taken back when that call
        leaves). ``waiter``: the nested call's own entry, already queued (not counted among those
        calls). (Until review R54 a
        nested call queued at its own class, the default one when its tool did not say: a parent
        of an urgent class, holding its slot while it waited for the call, waited behind every
        call of the classes between. Until review R68 an ancestor counted at its own class, not
        the one an urgent call joined to it raised it to.)"""
        ancestor: Waiter | None = parent
        held_tools = []
        while ancestor is not None:
            if ancestor.owner is self:
                held = ancestor.urgency or self.config.priority_class(ancestor.call.priority)
                if held.rank < priority.rank:
                    priority = held
                tool, limit = ancestor.call.tool, ancestor.limits.concurrency
                if limit is not None and self.tool_in_flight.get(tool, 0) >= limit:
                    held_tools.append(tool)  # full: its queued calls wait for the ancestor's slot
            ancestor = ancestor.parent
        # Calls queued for a tool slot an ancestor holds wait for this call too (review R67).
        waiting = self.queue.most_urgent_class(held_tools, priority.rank, waiter) if held_tools else None
        return (priority, False) if waiting is None else (self.config.priority_class(waiting), True)

    def lend_priority(self, tool: str, priority: PriorityClass) -> None:
        """A call of class ``priority`` queued for a slot of ``tool``, which is full: each queued
        nested call an ancestor of which runs ``tool`` (so holds such a slot, and waits for it)
        moves up to ``priority`` while it waits at a less urgent rank (``reclass``; review R67).
        It is lifted (``lifted``): moved back down once no call that lends it the class waits
        any more (``take_back``). Only the nested calls under a call to ``tool`` are visited
        (``nested_under_tool``; until review R69 every queued nested call was, on every such
        call queued)."""
        under = self.nested_under_tool.get(tool)
        if under is None:
            return
        for waiter in list(under):
            if waiter.alive and self.queue.rank_of(waiter) > priority.rank:
                self.reclass(waiter)

    def reclass(self, waiter: Waiter) -> None:
        """Move ``waiter``, a queued nested call, to the class it inherits now
        (``_inherited_priority`` of its ``urgency``): up to the tail of its tool's FIFO there,
        or down to the place its first arrival gives it (``FairQueue.move``'s ``back``), counted
        waiting once throughout. Noted in ``lifted`` while a waiting call lends it that class
        (lock held)."""
        parent, own = waiter.parent, waiter.urgency
        assert parent is not None and own is not None
        target, lent = self._inherited_priority(own, parent, waiter)
        queue = self.queue
        rank = queue.rank_of(waiter)
        if target.rank != rank or waiter.path[1].key != target.name:
            tenant = waiter.call.tenant
            share = self.shares.get(tenant) or self.config.tenant_share(tenant)
            queue.move(
                waiter, target.rank, target.name, target.weight, share.weight, back=target.rank >= rank
            )
        if lent:
            self.lifted[waiter] = None
        else:
            self.lifted.pop(waiter, None)

    def take_back(self) -> None:
        """A queued call left the queue (it started, was cancelled, its deadline passed): each
        lifted nested call moves to the class still lent to it (``reclass``: down to its own
        when no call waiting for its ancestors' slots is more urgent). (Until review R68 a
        nested call lifted by an urgent call kept that class until it started, after that call
        had left, ahead of the calls nobody urgent waited behind.)"""
        for waiter in list(self.lifted):
            if waiter.granted or not waiter.alive:
                del self.lifted[waiter]
            else:
                self.reclass(waiter)

    def reclass_nested(self, ancestor: Waiter) -> None:
        """``ancestor``, running, was raised or lowered (calls joined to it came or left): the
        queued nested calls under it (``nested_under``: only those are visited) move to the class
        they inherit now (lock held)."""
        under = self.nested_under.get(ancestor)
        if under is None:
            return
        for waiter in list(under):
            if not waiter.granted and waiter.alive:
                self.reclass(waiter)

    def _nest(self, waiter: Waiter) -> None:
        """``waiter``, a nested call, just queued: noted in ``nested_waiting`` (with its place in
        the queue's arrival order), under each of its ancestors of these limits in
        ``nested_under`` and under their tools in ``nested_under_tool``, and under each slot it
        counts against in ``nested_by`` (lock held)."""
        self.nested_waiting[waiter] = waiter.seq
        ancestor = waiter.parent
        while ancestor is not None:
            if ancestor.owner is self:
                _index(self.nested_under, ancestor, waiter)
                _index(self.nested_under_tool, ancestor.call.tool, waiter)
            ancestor = ancestor.parent
        for slot in self._nested_slots(waiter.call):
            _index(self.nested_by, slot, waiter)

    def _unnest(self, waiter: Waiter) -> None:
        """``waiter``, a nested call, no longer waits (started, left, dropped): out of
        ``nested_waiting`` and every index ``_nest`` put it in (a key with no queued nested call
        left is forgotten). Nothing for a call that never queued (lock held)."""
        if self.nested_waiting.pop(waiter, _ABSENT) is _ABSENT:
            return
        ancestor = waiter.parent
        while ancestor is not None:
            if ancestor.owner is self:
                _unindex(self.nested_under, ancestor, waiter)
                _unindex(self.nested_under_tool, ancestor.call.tool, waiter)
            ancestor = ancestor.parent
        for slot in self._nested_slots(waiter.call):
            _unindex(self.nested_by, slot, waiter)

    def _nested_slots(self, call: ToolCall) -> tuple[tuple[str, object], ...]:
        """The slots other than the global one that a call of ``call`` counts against, as keys of
        ``nested_by``: its tool's, and its tenant's and agent's where those limits count."""
        if self.per_tool_only:
            return (("tool", call.tool),)
        return (("tool", call.tool), ("tenant", call.tenant), ("principal", (call.tenant, call.agent_key)))

    def _unblocking(self, waiter: Waiter) -> tuple[list[Waiter], list[str]]:
        """What the finish of ``waiter`` (not yet counted) can give queued nested calls to start
        under: the ancestors whose slot it borrowed and gives back to them (not passed on to a
        nested call of its own), and the limits (``_DIMENSIONS``) whose slot it frees, full
        until now (lock held). Called only while nested calls wait (the hot path skips it)."""
        borrowed = waiter.borrowed or {}
        lent = waiter.lent or {}
        lenders = [lender for dimension, lender in borrowed.items() if dimension not in lent]
        call = waiter.call
        freed = [
            dimension
            for dimension in _DIMENSIONS
            if dimension not in borrowed
            and dimension not in lent
            and not (self.per_tool_only and dimension in ("tenant", "principal"))
            and self._slot_full(dimension, call, waiter.limits)
        ]
        return lenders, freed

    def _unblocked(self, finished: Waiter, lenders: list[Waiter], freed: list[str]) -> list[Waiter]:
        """The queued nested calls the finish of ``finished`` may let start, in the order they
        came: those under an ancestor in ``lenders`` (its slot is free to lend again), and those
        counting against a slot in ``freed`` that is still free after the queue's dispatch
        (their limit is no longer full; a global slot: every nested call). Every other queued
        nested call cannot start now: nothing it needs changed but slots taken (review R69;
        lock held)."""
        found: set[Waiter] = set()
        for lender in lenders:
            found.update(self.nested_under.get(lender, ()))
        call = finished.call
        for dimension in freed:
            if self._slot_full(dimension, call, finished.limits):
                continue  # taken again by the dispatch: nothing changed for the nested calls
            if dimension == "global":
                return list(self.nested_waiting)
            found.update(self.nested_by.get((dimension, _dimension_key(call, dimension)), ()))
        return sorted(found, key=self.nested_waiting.__getitem__)

    def _slot_full(self, dimension: str, call: ToolCall, limits: ToolLimits) -> bool:
        """Is the limit of ``dimension`` that ``call`` counts against at its limit now?"""
        if dimension == "global":
            limit = self.config.max_concurrency
            return limit is not None and self.in_flight >= limit
        if dimension == "tool":
            limit = limits.concurrency
            return limit is not None and self.tool_in_flight.get(call.tool, 0) >= limit
        if dimension == "tenant":
            return self._tenant_blocked(call.tenant)
        return self._agent_blocked(call.tenant, call.agent_key)

    def _borrow_plan(
        self, call: ToolCall, limits: ToolLimits, parent: Waiter, prefer_tool: bool = False
    ) -> dict[str, Waiter] | None:
        """For each limit ``call`` finds full, the nearest ancestor (from ``parent`` up) holding an
        unlent slot of it; None when some full limit has none ({} when no limit is full).
        ``prefer_tool``: the tool's limit is borrowed when an ancestor can lend it, full or not."""
        config = self.config
        full: list[str] = []
        if config.max_concurrency is not None and self.in_flight >= config.max_concurrency:
            full.append("global")
        if limits.concurrency is not None and (
            self.tool_in_flight.get(call.tool, 0) >= limits.concurrency
            or (prefer_tool and self._lender(parent, "tool", call.tool) is not None)
        ):
            full.append("tool")
        if not self.per_tool_only:
            if self._tenant_blocked(call.tenant):
                full.append("tenant")
            if self._agent_blocked(call.tenant, call.agent_key):
                full.append("principal")
        plan: dict[str, Waiter] = {}
        for dimension in full:
            lender = self._lender(parent, dimension, _dimension_key(call, dimension))
            if lender is None:
                return None
            plan[dimension] = lender
        return plan

    def _lender(self, parent: Waiter, dimension: str, key: object) -> Waiter | None:
        """The nearest running ancestor (``parent`` first) holding an unlent slot of ``dimension``
        counted for ``key`` in these limits, or None."""
        lender: Waiter | None = parent
        while lender is not None:
            if (
                lender.owner is self
                and lender.granted
                and not lender.finished
                and (lender.lent is None or dimension not in lender.lent)
                and _dimension_key(lender.call, dimension) == key
            ):
                return lender
            lender = lender.parent
        return None

    @staticmethod
    def _lend(waiter: Waiter, plan: dict[str, Waiter]) -> None:
        """Record that ``waiter`` runs under the slots of ``plan`` (lock held)."""
        waiter.borrowed = dict(plan)
        for dimension, lender in plan.items():
            if lender.lent is None:
                lender.lent = {}
            lender.lent[dimension] = waiter

    def _start_nested_waiting(self, candidates: Iterable[Waiter] | None = None) -> None:
        """Start queued nested calls that can now run under an ancestor's slot, in the order they
        came (lock held). ``candidates``: only those may (in the order they came); None: every
        queued nested call is looked at."""
        for waiter in list(self.nested_waiting) if candidates is None else candidates:
            if waiter.granted or not waiter.queued or not waiter.alive or waiter.future.done():
                self._unnest(waiter)
                continue
            assert waiter.parent is not None
            plan = self._borrow_plan(waiter.call, waiter.limits, waiter.parent)
            if not plan:
                continue
            limits = waiter.limits
            bucket = None
            if limits.rate is not None:
                bucket = self._bucket(waiter.call.tool, limits)
                if not bucket.try_take():
                    self._arm(time.monotonic() + bucket.wait_s())
                    continue
            self.queue.discard(waiter)
            if self._wake(waiter):
                self._lend(waiter, plan)
                self.start(waiter)
            else:
                # Its loop is closed: it never runs, so the token taken for it goes back (until
                # review R58 it was spent, and the tool had a token less than its rate allows).
                self._dropped(waiter)
                if bucket is not None:
                    bucket.give_back()

    def _start_borrowing(self, waiter: Waiter) -> None:
        """``start`` for an attempt running under borrowed slots: only its own ones are counted."""
        call = waiter.call
        borrowed = waiter.borrowed
        assert borrowed is not None
        if "global" not in borrowed:
            self.in_flight += 1
        if "tool" not in borrowed:
            self.tool_in_flight[call.tool] = self.tool_in_flight.get(call.tool, 0) + 1
        if not self.per_tool_only:
            if "tenant" not in borrowed:
                self.tenant_in_flight[call.tenant] = self.tenant_in_flight.get(call.tenant, 0) + 1
            if "principal" not in borrowed:
                agent = (call.tenant, call.agent_key)
                self.principal_in_flight[agent] = self.principal_in_flight.get(agent, 0) + 1

    def _finish_lending(self, waiter: Waiter) -> None:
        """``finish``'s counting for an attempt that borrowed or lent slots (lock held)."""
        call = waiter.call
        borrowed = waiter.borrowed or {}
        lent = waiter.lent or {}
        waiter.borrowed = waiter.lent = None
        for dimension in _DIMENSIONS:
            heir = lent.get(dimension)
            source = borrowed.get(dimension)
            if heir is not None:  # still running: it keeps the slot, counted as before
                assert heir.borrowed is not None
                if source is not None:
                    heir.borrowed[dimension] = source
                    assert source.lent is not None
                    source.lent[dimension] = heir
                else:
                    del heir.borrowed[dimension]  # now its own: given back when it finishes
                    if dimension == "tool":  # and the slot's cross-process lease with it
                        heir.lease, waiter.lease = waiter.lease, None
            elif source is not None:
                assert source.lent is not None
                del source.lent[dimension]
            elif dimension == "global":
                self.in_flight -= 1
            elif dimension == "tool":
                _decrement(self.tool_in_flight, call.tool)
            elif self.per_tool_only:
                continue
            elif dimension == "tenant":
                _decrement(self.tenant_in_flight, call.tenant)
            else:
                _decrement(self.principal_in_flight, (call.tenant, call.agent_key))


def _index(index: dict[Any, dict[Waiter, None]], key: Any, waiter: Waiter) -> None:
    entries = index.get(key)
    if entries is None:
        entries = index[key] = {}
    entries[waiter] = None


def _unindex(index: dict[Any, dict[Waiter, None]], key: Any, waiter: Waiter) -> None:
    entries = index.get(key)
    if entries is not None:
        entries.pop(waiter, None)
        if not entries:
            del index[key]


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
