"""The agentgate router: the backend with the lowest predicted time to first token that meets the
request's SLO, with cache locality, session affinity, priority classes and tenant quotas.

For each candidate (serves the model, healthy, below ``max_concurrency``, admitted by the
caller's ``allowed`` predicate) the router predicts TTFT with ``scorers.predicted_ttft()``:
queued prefill work, the uncached part of the prompt (the router-side prefix index), the decode
load sharing each step, and KV pressure (optionally scaled by a per-backend correction learned
from observed first tokens: ``predicted_ttft(calibrated=True)``). Backends without KV headroom for the request are dropped unless none has
any. Then:

1. *Affinity*: a session's previous backend is kept if it meets the SLO and is not saturated
   (its prediction exceeds the best by less than ``affinity_slack`` x the SLO).
2. *SLO met somewhere*: the lowest prediction wins; candidates within ``tie_tolerance`` of it
   are near-ties. Of these only the cheapest for the request are kept, by the inventory's
   ``cost`` (prompt tokens x ``input_per_mtok`` + output limit x ``output_per_mtok``; all
   backends cost 0 unless priced), and two of those drawn at random are compared by in-flight
   count (power of two choices), so that equal predictions do not pile onto one backend between
   scrapes.
3. *SLO met nowhere*: a tenant that has spent its token bucket is shed (``Shed``, HTTP 429,
   ``Retry-After`` = the bucket's refill time, at most ``MAX_RETRY_AFTER_S``); class 0 is
   dispatched to the best backend anyway; a request that no candidate could serve within its
   SLO even idle (its uncached prefill alone is longer) is dispatched to the best backend too,
   since neither waiting nor a retry could meet it; otherwise class 1 waits (a ``wait`` plan)
   while its SLO budget lasts, then is shed; classes 2 and lower are shed at once. Shed requests
   count as misses in every figure. A waiter in line that waits so turns down the slot it was
   offered: it keeps its place (its key), but leaves the queues until it asks again, so the slot
   goes to the next in line (until review R92 it kept the slot, idle, until shed) and no walk
   down the line passes it (until a regression review of R92 it stayed in them, passed at a step
   each by every ask and every ``due``: as much as the line was long).

*Saturation*: when every usable backend holds ``max_concurrency`` requests, classes 0 and 1 wait
for a slot (``RoutingPolicy._saturated``) and the router remembers them in line: class 0 before
class 1, and within a class in order of arrival. A slot that frees goes to the first in line
that may use it: a later or lower-class request asking meanwhile (a waiter asking again, or a new
arrival) is told to wait while the slots free for it are all spoken for by those ahead of it
(the free slots are matched to the waiters ahead, each on an engine its ``allowed`` admits, so one
that may use either of two free engines does not hold the only one a later waiter may use). A
waiter whose caller gives up leaves the line when told (``withdraw``; the dispatcher does so), or
else after ``WAITER_TIMEOUT_S`` without asking, once an ask or ``due`` passes its place in line
(or at the sweep, once a second): asking again, it is queued anew at its arrival's place
(its key is its class and arrival, so it goes back ahead of those that arrived after it, even
of those that kept asking; until a regression review of R91 this said "behind those that kept
asking", which was never so). One whose SLO budget is spent is shed when it asks and leaves the line then. Class 1 has no protection against class 0: under a steady stream of
class-0 arrivals a class-1 waiter is passed by each of them, and is shed once its SLO budget is
spent (it waits no longer than its SLO). Asking costs the same however long the line is, and
however many sets of backends its waiters may use: the line is kept as one queue per backend, of
the waiters that may use it (their model's backends, less those their ``allowed`` rules out), and
the walk down it merges only the queues of backends with a free slot, leaves the queues of the
engines where a waiter can be given none (none behind it could be given one there either), and
stops once the free slots are spoken for; a waiter leaving the line is left in its queues,
passed by the walk, until the dead are half a queue (each then dropped once). So every waiter asking again when a slot frees costs
linear, not quadratic, work, and waiters for a model whose engines are full cost an ask for
another model nothing (until review R91 each was walked past, one scan of every backend each;
until a regression review of R91 each set of backends the waiters may use cost a step);
``due`` names the waiters the free slots go to, so that a caller can wake only those.

Saturation is overload, where tenant quotas decide: a request whose tenant's token bucket cannot
pay for it is ``Shed`` at once (``Retry-After`` = the bucket's refill time, as above) rather than
put in line, and a waiter whose tenant has spent its bucket meanwhile is given no slot while a
waiter within its quota could use it (it is shed when it asks, unless a slot is left over; until
then the walk passes it, one check of its tenant's bucket, where its line has a free slot).

Backends that share a URL (``inventory.engine_key``: ``http://h`` and ``http://h:80`` are one
URL, ``/A`` and ``/a`` two) are one engine under several names (say one per tenant or per model
alias): they share one cap, the smallest ``max_concurrency`` among them, counted over the
requests in flight on all of them, instead of each allowing its own.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from agentgate._numbers import check_finite_non_negative
from agentgate._shown import quoted
from agentgate.dispatch._policy import (
    AllowedBackend,
    Candidate,
    RoutePlan,
    RouteRequest,
    RoutingPolicy,
    paid_before,
)
from agentgate.dispatch._retry_after import MAX_RETRY_AFTER_S
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.quota import TenantQuota, TokenBucket
from agentgate.dispatch.scorers import Scorer, predicted_ttft
from agentgate.dispatch.state import BackendState, SpeedModel
from agentgate.errors import InputError, NoBackend, Shed

__all__ = ["AllowedBackend", "Candidate", "RoutePlan", "RouteRequest", "Router"]

WAITER_TIMEOUT_S = 1.0
"""Seconds after its last ask that a waiter for a slot leaves the line (the dispatcher asks again
when a slot frees and at least every ``dispatcher.FREED_WAIT_S``; one that stopped asking was
given up by its caller)."""


@dataclass(slots=True)
class _Waiter:
    """A request waiting for a slot on a saturated model, in line."""

    key: tuple[int, float, float]
    """(priority class, arrival, sequence): the line's order."""
    tenant: str
    cost: float
    """What its tenant's token bucket pays for it (``_cost``)."""
    paid: float
    """For a call failed over: the tokens its bucket took for it already (``RouteRequest.paid``)."""
    backends: tuple[str, ...]
    """The backends serving its model that its caller's ``allowed`` admitted when it last asked,
    in inventory order: it is in the queue of each (``Router._queues``); none while it has turned
    down the slot it was offered at its last ask (``Router.route``)."""
    deadline: float
    """When its SLO budget is spent (it is shed at its next ask)."""
    asked: float
    """When it last asked."""
    watched: float | None = None
    """The time its entry in ``Router._quiet`` says it asked (never after ``asked``); ``None``
    while it has none (found gone, or ``asked`` is NaN: it never stops asking)."""
    overdue_listed: bool = False
    """Whether it has an entry in ``Router._overdue`` (none once found gone that way, or for a
    NaN deadline)."""
    found_gone: bool = False
    """Whether it is in ``Router._found``: found gone, not yet withdrawn."""


def _checked_quotas(quotas: object) -> dict[str, TenantQuota]:
    """``quotas`` (``None``: none) as the router keeps them; raises ``InputError`` unless it is a
    mapping of tenant names (text) to ``TenantQuota``, naming the first entry that is not."""
    if quotas is None:
        return {}
    if not isinstance(quotas, Mapping):
        raise InputError(
            f"router quotas must be a mapping of tenant to TenantQuota, got {type(quotas).__name__}"
        )
    for tenant, quota in quotas.items():
        if not isinstance(tenant, str):
            raise InputError(
                f"router quotas must be keyed by tenant name (text), got {type(tenant).__name__}"
            )
        if not isinstance(quota, TenantQuota):
            kind = type(quota)
            # The broker's quota has the same name: say whose it is.
            got = (
                f"{kind.__module__}.{kind.__name__}"
                if kind.__name__ == TenantQuota.__name__
                else kind.__name__
            )
            raise InputError(
                f"router quota for tenant {quoted(tenant)} must be a TenantQuota "
                f"(agentgate.dispatch.quota), got {got}"
            )
    return dict(quotas)


class Router(RoutingPolicy):
    """SLO-aware, cache-aware, quota-aware routing (see the module docstring).

    Raises ``InputError`` for a ``tie_tolerance`` or ``affinity_slack`` that is not a finite
    number >= 0 (a negative or NaN tolerance left no near-tie at all, and the first routed call
    failed with an untyped ``ValueError``), a ``max_sessions`` that is not a whole number >= 0
    (0: no session affinity kept), ``quotas`` that are not a mapping of tenant names (text) to
    ``TenantQuota`` (``agentgate.dispatch.quota``'s: a dict of its fields, as a config file reads
    it, or the broker's quota of the same name, was taken until review R89, and the tenant's
    first routed call failed with an untyped ``AttributeError``), and as ``RoutingPolicy`` does
    (a ``block_tokens`` below 1, a ``metrics_max_age_s`` that is not a finite number >= 0, a
    ``speed`` that is not a ``SpeedModel``).
    """

    name = "agentgate"

    def __init__(
        self,
        inventory: Inventory,
        *,
        speed: SpeedModel | Mapping[str, SpeedModel] | None = None,
        block_tokens: int = 16,
        seed: int = 0,
        metrics_max_age_s: float = 2.0,
        quotas: Mapping[str, TenantQuota] | None = None,
        predictor: Scorer | None = None,
        tie_tolerance: float = 0.1,
        affinity_slack: float = 0.25,
        max_sessions: int = 100_000,
    ) -> None:
        super().__init__(
            inventory, speed=speed, block_tokens=block_tokens, seed=seed, metrics_max_age_s=metrics_max_age_s
        )
        for name, value in (("tie_tolerance", tie_tolerance), ("affinity_slack", affinity_slack)):
            check_finite_non_negative(value, f"router {name}")
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 0:
            # Until review R66 unchecked: a string failed the first call with a session (an
            # untyped TypeError), and NaN or inf let the affinity map grow without bound.
            raise InputError(f"router max_sessions must be a whole number >= 0, got {max_sessions!r}")
        self.predictor = predictor or predicted_ttft()
        self.quotas = _checked_quotas(quotas)
        self.tie_tolerance = tie_tolerance
        self.affinity_slack = affinity_slack
        self.max_sessions = max_sessions
        self._buckets: dict[str, TokenBucket] = {}
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._waiters: dict[str, _Waiter] = {}
        self._queues: dict[str, list[tuple[tuple[int, float, float], str]]] = {}
        """The line, kept as one queue per backend: the (key, request id) of the waiters that may
        use it (``_Waiter.backends``), sorted; a backend that none may use has none. A waiter
        leaving a queue is left in it (``_listed`` says it is not), from where the queue starts
        (``_starts``) or among the dead (``_dead``), until more than half of the queue is dead
        (``_unqueue``): a waiter leaving the line costs about the same however long it is."""
        self._starts: dict[str, int] = {}
        """Where each queue starts: the entries before are dead, and dropped with the rest."""
        self._dead: dict[str, int] = {}
        """About how many entries of each queue from its start are dead (a count to decide when
        to drop them, not a promise)."""
        self._swept = -math.inf
        """When the line was last swept of waiters that stopped asking."""
        self._quiet: list[tuple[float, tuple[int, float, float], str]] = []
        """A heap of (when it asked, key, request id) of the waiters, one entry each (some stale):
        the first are the first to have stopped asking for ``WAITER_TIMEOUT_S``."""
        self._overdue: list[tuple[float, tuple[int, float, float], str]] = []
        """A heap of (deadline, key, request id) of the waiters: the first to be gone that way."""
        self._found: list[tuple[tuple[int, float, float], str]] = []
        """A heap of (key, request id) of the waiters found gone and not yet withdrawn: a walk
        down the line withdraws those ahead of where it stops (``_withdraw_gone``)."""
        self._arrivals = itertools.count()
        self._engines: dict[str, list[BackendState]] = {}
        """The backends of each engine (URL), which share one cap."""
        for state in self.states.values():
            self._engines.setdefault(state.backend.engine_key, []).append(state)

    def route(self, request: RouteRequest, now: float, allowed: AllowedBackend | None = None) -> RoutePlan:
        """As ``RoutingPolicy.route``, with the line for slots and the shared caps of backends
        with one URL (module docstring). Raises ``NoBackend`` or ``Shed`` as it does.

        ``allowed`` is read each time the request asks, not while it waits: a request in line
        keeps the backends ``allowed`` admitted at its last ask until it asks again (the
        dispatcher asks again when a slot frees for it and at least every
        ``dispatcher.FREED_WAIT_S``, 0.25 s). A predicate whose answer changes meanwhile (a
        grant narrowed or widened) counts from the next ask: until then a slot it no longer
        admits is kept for the request, and one it now admits is not. Until review R91 it was
        read again at every walk down the line, at a cost that grew with the line."""
        waiter = self._waiters.get(request.id)
        if waiter is not None:
            waiter.asked = now
            if not waiter.found_gone and (waiter.watched is None or now < waiter.watched):
                self._watch(waiter, request.id)  # ``now`` earlier than its entry (or it had none)
                # A clock going backwards pushes an entry at each ask, the last one stale: until
                # a second regression review of R91 they piled up while nobody left the line.
                self._bound_heaps()
        try:
            plan = super().route(request, now, allowed)
        except NoBackend:
            self.withdraw(request.id)
            raise
        if plan.action == "dispatch":
            self.withdraw(request.id)
        elif request.id in self._waiters:
            # In the queues of the backends its ``allowed`` admits now (asked once per ask, not
            # at every walk down the line). A wait from ``choose``, not for a slot, turned down
            # the slot it was offered: in none then, so the slot goes to the next in line, and
            # no walk passes it, until it asks again (its key kept: then it is offered a slot at
            # its place in line, and filed there if it waits for one). Until review R92 it kept
            # the slot, idle, the next in line told to wait, until it was shed; until a
            # regression review of R92 it stayed in the queues, marked, and every ask and every
            # ``due`` walked past each one so waiting ahead: as much as the line was long.
            self._file(request.id, self._backends(request.model, allowed) if plan.until_freed else ())
        return plan

    def withdraw(self, request_id: str) -> None:
        """The request stopped waiting (dispatched, refused, or its caller gave up): it leaves the
        line at once, so the slots it was owed go to those behind it. Unknown ids are ignored."""
        waiter = self._waiters.pop(request_id, None)
        if waiter is not None:
            self._leave(waiter, request_id)
            if not self._waiters:
                self._queues.clear()
                self._starts.clear()
                self._dead.clear()
                self._quiet.clear()
                self._overdue.clear()
                self._found.clear()
            else:
                self._bound_heaps()

    def _bound_heaps(self) -> None:
        """Drop the stale entries of ``_quiet``, ``_overdue`` and ``_found`` (``_tidy``) once they
        hold more than 8 for each waiter (and 64): each tidy costs as much as the entries since
        the last one, so at most a heap step more for each."""
        if len(self._quiet) + len(self._overdue) + len(self._found) > 8 * len(self._waiters) + 64:
            self._tidy()

    def _backends(self, model: str, allowed: AllowedBackend | None) -> tuple[str, ...]:
        """The backends serving ``model`` that ``allowed`` admits, in inventory order: the queues
        a waiter is kept in."""
        return tuple(
            name
            for name, state in self.states.items()
            if model in state.backend.models and (allowed is None or allowed(state.backend))
        )

    def _file(self, request_id: str, backends: tuple[str, ...]) -> None:
        """Keep waiter ``request_id`` in the queues of ``backends`` (and no other), at its place
        by its key."""
        waiter = self._waiters[request_id]
        if waiter.backends == backends:
            return
        entry = (waiter.key, request_id)
        before, waiter.backends = waiter.backends, backends
        for name in before:
            if name not in backends:
                self._unqueue(name, entry)
        for name in backends:
            if name not in before:
                queue = self._queues.setdefault(name, [])
                bisect.insort(queue, entry, lo=self._starts.get(name, 0))

    def _leave(self, waiter: _Waiter, request_id: str) -> None:
        """Take ``waiter`` out of the queues it is in."""
        entry = (waiter.key, request_id)
        for name in waiter.backends:
            self._unqueue(name, entry)

    def _unqueue(self, backend: str, entry: tuple[tuple[int, float, float], str]) -> None:
        """``entry`` (no longer ``_listed``) leaves ``backend``'s queue: at once from its end,
        else it is left there dead, and the dead are dropped (the queue away once empty) when
        they are half of it or more, so each costs about a step (until a second regression
        review of R91 each was deleted at once, moving the rest of the list: as much as the line
        was long, in the queue of every backend the waiter could use)."""
        queue = self._queues[backend]
        start = self._starts.get(backend, 0)
        if queue[-1] == entry and len(queue) > start:
            queue.pop()
        else:
            self._dead[backend] = self._dead.get(backend, 0) + 1
        if 2 * (start + self._dead.get(backend, 0)) >= len(queue):
            self._compact(backend)

    def _compact(self, backend: str) -> None:
        """Drop the dead entries of ``backend``'s queue, and the queue once empty."""
        seen: set[str] = set()
        queue = []
        for entry in self._queues[backend][self._starts.pop(backend, 0) :]:
            if entry[1] not in seen and self._listed(backend, entry):
                seen.add(entry[1])  # one filed here again while its dead entry stood: kept once
                queue.append(entry)
        self._dead.pop(backend, None)
        if queue:
            self._queues[backend] = queue
        else:
            del self._queues[backend]

    def _listed(self, backend: str, entry: tuple[tuple[int, float, float], str]) -> bool:
        """Whether ``entry`` of ``backend``'s queue is a waiter in line that may use it."""
        waiter = self._waiters.get(entry[1])
        return waiter is not None and waiter.key is entry[0] and backend in waiter.backends

    def _saturated(self, request: RouteRequest, now: float) -> RoutePlan:
        """The base rule (wait, or ``Shed``), and a request told to wait takes its place in line;
        but a request whose tenant's token bucket cannot pay for it is ``Shed`` at once, whatever
        its class: saturation is overload, where tenants over their quota are shed first (else a
        tenant in debt would hold the line, and take the slots that free, ahead of the tenants
        within their quota, who would be shed when their SLO budget ran out)."""
        cost = _cost(request)
        bucket = self._bucket(request.tenant, now)
        if bucket is not None and not bucket.can_pay(cost, now, paid=paid_before(request)):
            raise Shed(
                f"every backend serving {request.model!r} is at its max_concurrency and tenant "
                f"{request.tenant!r} is over its token quota",
                retry_after_s=_quota_retry_after_s(bucket, cost, now),
            )
        plan = super()._saturated(request, now)
        if request.id not in self._waiters:
            key = (request.priority, _arrival(request, now), next(self._arrivals))
            waiter = self._waiters[request.id] = _Waiter(
                key=key,
                tenant=request.tenant,
                cost=cost,
                paid=paid_before(request),
                backends=(),  # ``route`` files it in its queues, by its ``allowed``
                deadline=request.arrived_at + request.slo_ttft_s,
                asked=now,
            )
            self._watch(waiter, request.id)
        return plan

    def _gone(self, waiter: _Waiter, now: float) -> bool:
        """Whether ``waiter``'s caller gave up (it stopped asking), or it was shed and never asked again."""
        return now - waiter.asked > WAITER_TIMEOUT_S or now > waiter.deadline + WAITER_TIMEOUT_S

    def _watch(self, waiter: _Waiter, request_id: str) -> None:
        """Give ``waiter`` its entries in ``_quiet`` (for when it last asked) and ``_overdue``,
        where it has none that tells when it will be gone."""
        if waiter.asked == waiter.asked and (waiter.watched is None or waiter.asked < waiter.watched):
            waiter.watched = waiter.asked
            heapq.heappush(self._quiet, (waiter.asked, waiter.key, request_id))
        if not waiter.overdue_listed and waiter.deadline == waiter.deadline:
            waiter.overdue_listed = True
            heapq.heappush(self._overdue, (waiter.deadline, waiter.key, request_id))

    def _find_gone(self, now: float) -> None:
        """Put every waiter gone at ``now`` in ``_found``: the first of ``_quiet`` and
        ``_overdue``, while they are gone. ``now - asked > WAITER_TIMEOUT_S`` holds for an
        earlier ``asked`` wherever it holds for a later one (and ``now > deadline +
        WAITER_TIMEOUT_S`` likewise), so none after the first that is not gone is; each waiter
        found costs a heap step, and each ask at most one more."""
        quiet = self._quiet
        while quiet and now - quiet[0][0] > WAITER_TIMEOUT_S:
            asked, key, request_id = heapq.heappop(quiet)
            waiter = self._in_line(key, request_id)
            if waiter is None or waiter.watched != asked:
                continue  # it left the line, or asked earlier than this entry says since
            waiter.watched = None
            if waiter.found_gone:
                continue
            if self._gone(waiter, now):
                waiter.found_gone = True
                heapq.heappush(self._found, (key, request_id))
            else:
                self._watch(waiter, request_id)  # it asked since: by its last ask
        overdue = self._overdue
        while overdue and now > overdue[0][0] + WAITER_TIMEOUT_S:
            _, key, request_id = heapq.heappop(overdue)
            waiter = self._in_line(key, request_id)
            if waiter is None:
                continue
            waiter.overdue_listed = False
            if not waiter.found_gone:
                waiter.found_gone = True
                heapq.heappush(self._found, (key, request_id))

    def _withdraw_gone(self, before: tuple[float, float, float] | None, now: float) -> None:
        """Withdraw the waiters gone at ``now`` ahead of ``before`` in line (``None``: all), as a
        walk down the line to there withdraws those it passes (``_find_gone`` first). One found
        gone that has asked since keeps its place (and its entries are renewed)."""
        found = self._found
        while found and (before is None or found[0][0] < before):
            key, request_id = heapq.heappop(found)
            waiter = self._in_line(key, request_id)
            if waiter is None:
                continue
            waiter.found_gone = False
            if self._gone(waiter, now):
                self.withdraw(request_id)
            else:
                self._watch(waiter, request_id)

    def _in_line(self, key: tuple[int, float, float], request_id: str) -> _Waiter | None:
        """Waiter ``request_id`` if it is in line under ``key`` (an entry of ``_quiet``,
        ``_overdue`` or ``_found`` for one that left the line, or left and came back, is stale)."""
        waiter = self._waiters.get(request_id)
        return waiter if waiter is not None and waiter.key == key else None

    def _tidy(self) -> None:
        """Drop the entries of waiters that left the line from ``_quiet``, ``_overdue`` and
        ``_found``, and those a later entry of the waiter replaced (each waiter keeps at most one
        in each)."""
        self._quiet = [
            entry
            for entry in self._quiet
            if (waiter := self._in_line(entry[1], entry[2])) is not None and waiter.watched == entry[0]
        ]
        self._overdue = [
            entry
            for entry in self._overdue
            if (waiter := self._in_line(entry[1], entry[2])) is not None and waiter.overdue_listed
        ]
        self._found = [
            entry
            for entry in self._found
            if (waiter := self._in_line(entry[0], entry[1])) is not None and waiter.found_gone
        ]
        heapq.heapify(self._quiet)
        heapq.heapify(self._overdue)
        heapq.heapify(self._found)

    def due(self, now: float) -> list[str]:
        """The waiters in line that the free slots go to (matched as ``_free`` matches them, in
        order of the line): the ones worth waking when a slot frees; the rest would be told to
        wait. Waiters that stopped asking are passed over; those that turned down the slot they
        were offered at their last ask are in no queue until they ask again (``route``)."""
        given, _, _ = self._match((math.inf, math.inf, math.inf), now)
        return [name for names in given.values() for name in names]

    def _free(self, candidates: list[BackendState], request: RouteRequest, now: float) -> list[BackendState]:
        """The candidates with a slot left for ``request``: its engine's shared cap not reached,
        and not every free slot it could use spoken for by the waiters ahead of it in line.

        The waiters ahead are given the free slots in order of the line, each on an engine it may
        use, moving one given earlier to another engine it may use when that makes room (a
        matching, not a first fit: a waiter that may use two engines does not block one behind it
        that may use only one of them). The walk stops once no free slot is left, and passes
        over the waiters that could use none of those left (``_match``): asking costs about the
        same however long the line is, and however many sets of backends its waiters may use,
        when every waiter asks again as a slot frees.
        A request whose tenant's token bucket cannot pay for it has every waiter within its quota
        ahead of it (it takes only a slot none of them could use; else ``_saturated`` sheds it)."""
        mine = self._waiters.get(request.id)
        if self._in_debt(request.tenant, _cost(request), now, paid=paid_before(request)):
            key: tuple[float, float, float] = (math.inf, math.inf, math.inf)
        else:
            key = mine.key if mine is not None else (request.priority, _arrival(request, now), math.inf)
        given, usable, spare = self._match(key, now)
        left = set()
        for state in candidates:
            url = state.backend.engine_key
            if url in spare and (url in left or _room(url, usable, given, spare, set())):
                left.add(url)
        return [s for s in candidates if s.backend.engine_key in left]

    def _spare(self) -> dict[str, int]:
        """The free slots of each engine (URL) that has any, under its shared cap, among the
        engines that can take work (one of its backends healthy). Until review R57 the slots of
        engines marked down counted too: no waiter is given one, so the walk down the line
        (``_match``) never found the free slots all given and went to its end at every ask."""
        free = {
            url: min(s.backend.max_concurrency for s in engine) - sum(s.in_flight for s in engine)
            for url, engine in self._engines.items()
            if any(s.healthy for s in engine)
        }
        return {url: n for url, n in free.items() if n > 0}

    def _match(
        self, key: tuple[float, float, float], now: float
    ) -> tuple[dict[str, list[str]], dict[str, set[str]], dict[str, int]]:
        """The free slots given to the waiters ahead of ``key`` in line (engine -> waiters), the
        engines each of those may use, and the free slots of each engine (``_spare``, counted
        once per ask); the walk stops once every free slot is given. A waiter
        whose tenant's token bucket cannot pay for it now is given none (it is shed at its next
        ask unless a slot is left over for it); one that turned down the slot it was offered at
        its last ask is in no queue, and not walked past, until it asks again (``route``).

        The walk merges the queues of the backends that may take a slot (healthy, on an engine
        with a free one) in order of the line, each waiter once, so it visits only waiters that
        may use a free slot (queues per backend, not per engine: a backend marked down on an
        engine with another one up would bring in the waiters that may use only it). A waiter no
        slot can be found for (no augmenting path) leaves every engine it may use full with no
        way to free a slot there, and so they stay while later waiters are given theirs (an
        augmenting path only grows the matching): the queues of their backends are left then,
        as none behind could be given a slot through them. The waiters gone (``_gone``) ahead of
        where the walk stops are withdrawn, as a walk down the whole line withdrew those it
        passed (until a regression review of R91 only those the walk looked at were: one that
        stopped asking kept its place, and asking again took a slot from one that never
        stopped). So an ask costs, besides one look at each backend, a heap step for each waiter
        given a slot, each one given none (at most one per engine), each in debt that it passes
        and each gone, however long the line and however many sets of backends its waiters may
        use (until a regression review of R92 also each that had turned its slot down). Until review
        R91 the walk went through every waiter ahead, rebuilding the engines each may use from every
        backend, while a free slot was left that none of them could use: each ask,
        and each slot freed, cost as much as the line was long; until a regression review of R91
        it merged one line per set of backends the waiters may use, and cost as much as there
        were such sets (every waiter with its own ``allowed``: as much as the line was long)."""
        self._find_gone(now)
        if now - self._swept > WAITER_TIMEOUT_S:
            self._swept = now
            self._withdraw_gone(None, now)
        spare = self._spare()
        given: dict[str, list[str]] = {url: [] for url in spare}
        usable: dict[str, set[str]] = {}
        left = sum(spare.values())
        if not left:
            return given, usable, spare  # the walk stops before the first waiter
        # (waiter key, request id, backend, place in the backend's queue, the backend's engine)
        heads: list[tuple[tuple[int, float, float], str, str, int, str]] = []
        for url in spare:
            for state in self._engines[url]:
                queue = self._queues.get(state.name)
                start = self._starts.get(state.name, 0)
                if queue and state.healthy and start < len(queue):
                    heads.append((*queue[start], state.name, start, url))
        heapq.heapify(heads)
        seen: set[str] = set()
        full: set[str] = set()
        """The engines where no slot can be found for a waiter that may use them."""
        stop = key
        """Where the walk stops: at ``key``, or at the waiter given the last free slot."""
        while heads and left > 0:
            waiter_key, name, backend, at, url = heads[0]
            if waiter_key >= key:
                break
            if url in full:
                heapq.heappop(heads)  # none behind in this queue can be given a slot through it
                continue
            if not self._listed(backend, (waiter_key, name)):
                if at == self._starts.get(backend, 0):
                    self._starts[backend] = at + 1  # dead at its start: no walk passes it again
                    self._dead[backend] = max(0, self._dead.get(backend, 0) - 1)
            elif name not in seen:
                seen.add(name)
                waiter = self._waiters[name]
                # One gone is withdrawn after the walk (``_withdraw_gone``): the queues stay as walked.
                if not self._gone(waiter, now) and not self._in_debt(
                    waiter.tenant, waiter.cost, now, paid=waiter.paid
                ):
                    usable[name] = {
                        engine
                        for backend_name in waiter.backends
                        if (engine := self.states[backend_name].backend.engine_key) in spare
                        and self.states[backend_name].healthy
                    }
                    if _place(name, usable, given, spare, set()):
                        left -= 1
                        if not left:
                            stop = waiter_key
                            break
                    else:
                        full.update(usable[name])  # ``url`` among them: this head goes next
                        continue
            queue = self._queues[backend]
            if at + 1 < len(queue):
                heapq.heapreplace(heads, (*queue[at + 1], backend, at + 1, url))
            else:
                heapq.heappop(heads)
        self._withdraw_gone(stop, now)
        return given, usable, spare

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        """Apply the rule in the module docstring; raises ``Shed`` when the request is refused."""
        candidates = self._free(candidates, request, now)
        if not candidates:
            return self._saturated(request, now)
        waited = max(0.0, now - request.arrived_at)
        scored = sorted(
            ((self.predictor(s, request, now) + waited, s) for s in candidates), key=lambda item: item[0]
        )
        roomy = [(p, s) for p, s in scored if self._kv_fits(s, request, now)]
        scored = roomy or scored
        alternatives = tuple(
            Candidate(s.name, p, s.cached_tokens(request.prefix_hashes, request.prompt_tokens), s.in_flight)
            for p, s in scored
        )
        best_p, best = scored[0]
        cost = _cost(request)
        bucket = self._bucket(request.tenant, now)

        if best_p <= request.slo_ttft_s:
            sticky = self._sessions.get(request.session) if request.session else None
            for p, s in scored:
                if (
                    s.name == sticky
                    and p <= request.slo_ttft_s
                    and p <= best_p + self.affinity_slack * request.slo_ttft_s
                ):
                    return self._go(s, p, request, now, "session affinity", alternatives)
            ties = [(p, s) for p, s in scored if p <= best_p * (1 + self.tie_tolerance) + 1e-3]
            prices = [_price(s, request) for _, s in ties]
            if min(prices) < max(prices):
                # Cost-aware tie-break: of backends about as fast, only the cheapest for this
                # request (the inventory's ``cost``) are kept; as they fill, their predictions
                # rise past the tolerance and the dearer ones take the overflow.
                ties = [tie for tie, price in zip(ties, prices, strict=True) if price == min(prices)]
                if len(ties) == 1:
                    p, s = ties[0]
                    return self._go(s, p, request, now, "cheapest of the near-ties", alternatives)
            if len(ties) > 1:
                a, b = self.rng.sample(ties, 2)
                p, s = min(a, b, key=lambda item: (item[1].in_flight, item[0]))
                return self._go(
                    s,
                    p,
                    request,
                    now,
                    f"lowest predicted TTFT ({len(ties)} near-ties, 2 choices)",
                    alternatives,
                )
            return self._go(best, best_p, request, now, "lowest predicted TTFT", alternatives)

        if bucket is not None and not bucket.can_pay(cost, now, paid=paid_before(request)):
            raise Shed(
                f"SLO {request.slo_ttft_s:.2f}s cannot be met (best {best_p:.2f}s) and tenant "
                f"{request.tenant!r} is over its token quota",
                retry_after_s=_quota_retry_after_s(bucket, cost, now),
            )
        if request.priority <= 0:
            return self._go(
                best, best_p, request, now, "SLO unmet anywhere; class 0 served best-effort", alternatives
            )
        if self._unreachable(candidates, request):
            # Its own prefill on an idle backend already takes longer than its SLO: neither waiting
            # nor a retry (a shed's Retry-After) could ever meet it, so it is served best-effort.
            return self._go(
                best,
                best_p,
                request,
                now,
                "SLO unreachable even on an idle backend; served best-effort",
                alternatives,
            )
        budget = request.slo_ttft_s - waited
        excess = best_p - waited - budget
        if request.priority == 1 and budget > 0 and excess < budget:
            wait = min(max(0.05, excess), budget / 2)
            return RoutePlan(
                request_id=request.id,
                action="wait",
                backend=None,
                predicted_ttft_s=best_p,
                meets_slo=False,
                cached_tokens=0,
                reason=f"SLO unmet anywhere; class {request.priority} waits",
                wait_s=wait,
                candidates=alternatives,
            )
        raise Shed(
            f"SLO {request.slo_ttft_s:.2f}s cannot be met (best predicted {best_p:.2f}s); "
            f"class {quoted(request.priority)} shed",  # a class of 5,000 digits has no ``str``
            # A prediction, however far off: a backend reporting 10**7 requests waiting made it
            # days, and the caller's Retry-After with it. Bounded as a backend's own is honoured.
            retry_after_s=min(max(1.0, excess), MAX_RETRY_AFTER_S),
        )

    def _go(
        self,
        state: BackendState,
        predicted: float,
        request: RouteRequest,
        now: float,
        reason: str,
        alternatives: tuple[Candidate, ...],
    ) -> RoutePlan:
        bucket = self._bucket(request.tenant, now)
        debited = 0.0
        if bucket is not None and not request.failover:
            debited = bucket.debit(_cost(request), now)
        if request.session:
            self._sessions[request.session] = state.name
            self._sessions.move_to_end(request.session)
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        # What the bucket took, for the dispatcher to hand back if the call fails over
        # (``RouteRequest.paid``).
        return self.plan(state, request, reason, predicted, alternatives, debited)

    def _in_debt(self, tenant: str, cost: float, now: float, *, paid: float = 0.0) -> bool:
        """Whether ``tenant``'s token bucket cannot pay ``cost`` now (never, for a tenant without a
        quota); ``paid``: for a call failed over, what its first dispatch took already
        (``TokenBucket.can_pay``). Until review R82 that debit counted against the call itself:
        a call within its quota that failed over under overload was shed as over it."""
        bucket = self._bucket(tenant, now)
        return bucket is not None and not bucket.can_pay(cost, now, paid=paid)

    def _bucket(self, tenant: str, now: float) -> TokenBucket | None:
        quota = self.quotas.get(tenant)
        if quota is None:
            return None
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(quota, now)
        return bucket

    @staticmethod
    def _unreachable(candidates: list[BackendState], request: RouteRequest) -> bool:
        """Whether no candidate could meet the request's SLO even idle: the prefill of the part of
        its prompt not cached there is longer than the SLO everywhere."""
        return all(
            s.speed.prefill_s(request.prompt_tokens - cached, cached) > request.slo_ttft_s
            for s in candidates
            for cached in (s.cached_tokens(request.prefix_hashes, request.prompt_tokens),)
        )

    @staticmethod
    def _kv_fits(state: BackendState, request: RouteRequest, now: float) -> bool:
        cached = state.cached_tokens(request.prefix_hashes, request.prompt_tokens)
        need = request.prompt_tokens - cached + request.max_output_tokens
        return state.kv_used_tokens(now) + need <= state.kv_capacity_tokens

    def on_first_token(self, backend: str, ttft_s: float, predicted_s: float) -> None:
        """Learn the backend's correction factor from observed versus predicted TTFT (EWMA)."""
        state = self.states[backend]
        base = predicted_s / state.correction if state.correction > 0 else predicted_s
        if base <= 1e-4 or ttft_s <= 0:
            return
        ratio = min(3.0, max(0.5, ttft_s / base))
        state.correction += 0.1 * (ratio - state.correction)


def _price(state: BackendState, request: RouteRequest) -> int:
    """What ``request`` would cost on ``state``'s backend at its inventory ``cost`` (micro-dollars
    per million tokens times tokens: compared, never charged), its whole output limit counted."""
    cost = state.backend.cost
    return cost.input_per_mtok * request.prompt_tokens + cost.output_per_mtok * request.max_output_tokens


def _cost(request: RouteRequest) -> float:
    """What a request costs its tenant's token bucket: its prompt and its maximum output."""
    return float(request.prompt_tokens + request.max_output_tokens)


def _quota_retry_after_s(bucket: TokenBucket, cost: float, now: float) -> float:
    """The ``Retry-After`` of a call shed for its tenant's quota: the seconds until ``bucket`` can
    pay ``cost`` (a retry is a new call, charged again), at least 1 and at most
    ``MAX_RETRY_AFTER_S``, as a shed for the SLO is. Until review R82 unbounded: a quota refilling
    1e-320 tokens a second (a positive finite rate, accepted) made it infinite, and the gateway
    failed writing it as the answer's ``Retry-After``."""
    return min(max(1.0, bucket.seconds_until(cost, now)), MAX_RETRY_AFTER_S)


def _arrival(request: RouteRequest, now: float) -> float:
    """``request``'s arrival, its place in line; ``now`` for one that is no number (NaN), which
    would break the line's order."""
    return request.arrived_at if request.arrived_at == request.arrived_at else now


def _place(
    name: str,
    usable: Mapping[str, set[str]],
    given: dict[str, list[str]],
    spare: Mapping[str, int],
    seen: set[str],
) -> bool:
    """Give waiter ``name`` a free slot on an engine it may use, moving waiters given one before
    to other engines they may use if that makes room (an augmenting path); whether it got one."""
    for url in usable[name]:
        if url in seen:
            continue
        seen.add(url)
        if len(given[url]) < spare[url]:
            given[url].append(name)
            return True
        for i, other in enumerate(given[url]):
            if _place(other, usable, given, spare, seen):
                given[url][i] = name
                return True
    return False


def _room(
    url: str,
    usable: Mapping[str, set[str]],
    given: Mapping[str, list[str]],
    spare: Mapping[str, int],
    seen: set[str],
) -> bool:
    """Whether a slot on engine ``url`` can be left free with every waiter given one keeping one
    (one given there moving to another engine it may use, and so on); changes nothing."""
    seen.add(url)
    if len(given[url]) < spare[url]:
        return True
    return any(
        _room(other_url, usable, given, spare, seen)
        for other in given[url]
        for other_url in usable[other]
        if other_url not in seen
    )
