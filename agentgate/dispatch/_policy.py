"""The shared frame of every routing policy: candidate filtering, accounting, and the hooks.

A policy (the agentgate router or a baseline) sees the backends that serve the model, are
healthy, have room under ``max_concurrency`` and that the caller's ``allowed`` predicate admits,
and chooses among them. Every policy gets the same information: its own dispatch accounting
(counted at dispatch), first tokens and completions, and the engines' scraped metrics.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agentgate._numbers import check_finite_non_negative
from agentgate._shown import quoted
from agentgate.dispatch.inventory import Backend, Inventory
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.prefix_index import PrefixIndex
from agentgate.dispatch.state import BackendState, SpeedModel
from agentgate.errors import InputError, NoBackend, Shed, UnknownModel

SATURATED_POLL_S = 0.02
"""How often a request waiting for a slot under ``max_concurrency`` asks again (seconds) where
nothing says when a slot frees (the simulator); the dispatcher is told (``RoutePlan.until_freed``)."""

AllowedBackend = Callable[[Backend], bool]
"""The caller's grant and tenant quota as a predicate: may this request use this backend? Read
each time the request asks the router (``route``): a request waiting for a slot keeps the answers
of its last ask until it asks again (the dispatcher asks again at least every 0.25 s)."""


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One model call as the router sees it."""

    id: str
    """Unique per call."""
    model: str
    """Model name, matched against the backends' ``models``."""
    prompt_tokens: int
    """Prompt length (estimated if no tokenizer is at hand)."""
    max_output_tokens: int = 256
    """Upper bound on generated tokens."""
    prefix_hashes: tuple[int, ...] = ()
    """Chained block hashes of the prompt (``agentgate.dispatch.prefix.block_hashes``)."""
    tenant: str = "default"
    """Tenant whose quota pays."""
    priority: int = 1
    """Priority class: 0 is the highest; larger waits or is shed first."""
    slo_ttft_s: float = 2.0
    """Time-to-first-token objective."""
    session: str | None = None
    """Agent run or conversation id, for affinity."""
    arrived_at: float = 0.0
    """When the call arrived (the router's clock); waiting counts against the SLO."""
    failover: bool = False
    """A call routed again after a backend failed it before any output: its tenant's token
    bucket was debited when it was first dispatched and is not debited again, nor is that debit
    (``paid``) counted against it where the router asks whether its tenant can pay
    (``TokenBucket.can_pay``)."""
    paid: float = 0.0
    """For a call failed over (counted only with ``failover``, see ``paid_before``), the tokens its first dispatch took from its tenant's bucket
    (``RoutePlan.debited``, which the dispatcher hands back): what the floor at ``-burst`` left
    of its cost. Until review R86 the whole cost was counted back, and a call costing twice the
    burst or more was found within its quota whatever its tenant owed."""


def paid_before(request: RouteRequest) -> float:
    """What ``request``'s tenant paid for it already: its ``paid`` for a call failed over, else
    nothing (a first dispatch has paid nothing, whatever a hand-built ``paid`` says). Until review
    R86d the router and the dispatcher read ``paid`` without ``failover``, and a request built with
    ``paid`` but not failed over was found within its quota whatever its tenant owed."""
    return request.paid if request.failover else 0.0


def failed_over(request: RouteRequest, plan: RoutePlan) -> RouteRequest:
    """``request`` to route again after ``plan``'s backend failed it before any output: not
    debited again, and what its dispatches took so far handed back with it (``paid``)."""
    return replace(request, failover=True, paid=paid_before(request) + plan.debited)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One backend's prediction for a request."""

    backend: str
    predicted_ttft_s: float
    cached_tokens: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The routing decision for one request: where it goes, or how long to wait and ask again."""

    request_id: str
    action: Literal["dispatch", "wait"]
    backend: str | None
    """The chosen backend (``None`` when waiting)."""
    predicted_ttft_s: float
    """Predicted arrival-to-first-token time on that backend, waiting so far included."""
    meets_slo: bool
    cached_tokens: int
    """Prompt tokens predicted to be served from the backend's prefix cache."""
    reason: str
    """Why this choice, in a few words (for logs and the audit entry)."""
    wait_s: float = 0.0
    """Ask again after this long (``action == "wait"``)."""
    until_freed: bool = False
    """A wait for a slot (every backend at its ``max_concurrency``): asking again is worth it only
    once a request has finished or a backend came back, so the dispatcher waits for that (or
    ``FREED_WAIT_S``, or the SLO budget) instead of asking every ``wait_s``; simpler loops (the
    simulator) just ask again after ``wait_s``."""
    candidates: tuple[Candidate, ...] = field(default=())
    """Every candidate considered, with its prediction."""
    debited: float = 0.0
    """The tokens this dispatch took from the tenant's token bucket (``TokenBucket.debit``; 0
    without a quota, and for a call failed over, which is not debited again)."""


@dataclass(slots=True)
class _Dispatch:
    backend: str
    at: float
    predicted_s: float


class RoutingPolicy(ABC):
    """Base of the agentgate router and the baselines: same inputs, different choice."""

    name = "policy"

    def __init__(
        self,
        inventory: Inventory,
        *,
        speed: SpeedModel | Mapping[str, SpeedModel] | None = None,
        block_tokens: int = 16,
        seed: int = 0,
        metrics_max_age_s: float = 2.0,
    ) -> None:
        if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
            raise InputError(f"router block_tokens must be an integer >= 1, got {block_tokens!r}")
        check_finite_non_negative(metrics_max_age_s, "router metrics_max_age_s")
        self.inventory = inventory
        self.block_tokens = block_tokens
        self.rng = random.Random(seed)
        self.states: dict[str, BackendState] = {}
        for backend in inventory.backends:
            sp = (
                speed.get(backend.name, SpeedModel()) if isinstance(speed, Mapping) else speed or SpeedModel()
            )
            if not isinstance(sp, SpeedModel):  # else an AttributeError at the first routed call
                raise InputError(
                    f"router speed for backend {backend.name!r} must be a SpeedModel, got {type(sp).__name__}"
                )
            capacity = backend.kv_capacity_tokens or 100_000
            self.states[backend.name] = BackendState(
                backend=backend,
                speed=sp,
                index=PrefixIndex(max(1, capacity // block_tokens)),
                block_tokens=block_tokens,
                metrics_max_age_s=metrics_max_age_s,
            )
        self._inflight: dict[str, _Dispatch] = {}

    # --- the decision --------------------------------------------------------------------

    def route(self, request: RouteRequest, now: float, allowed: AllowedBackend | None = None) -> RoutePlan:
        """Choose a backend for ``request`` and count it there at once.

        When every usable backend already holds ``max_concurrency`` requests, the plan is to wait
        (see ``_saturated``): the cap is never exceeded. Raises ``UnknownModel`` (a
        ``NoBackend``) when no backend serves the model at all, ``NoBackend`` when none that
        serves it is healthy and allowed; ``Shed`` (a ``NoBackend``) when the policy refuses the
        request under load or no slot freed within its SLO.
        """
        serving = [s for s in self.states.values() if request.model in s.backend.models]
        if not serving:
            raise UnknownModel(f"no backend serves model {request.model!r}")
        permitted = [s for s in serving if allowed is None or allowed(s.backend)]
        if not permitted:
            raise NoBackend(f"the caller may use none of the backends serving {request.model!r}")
        live = [s for s in permitted if s.healthy]
        if not live:
            raise NoBackend(f"every backend serving {request.model!r} is down")
        roomy = [s for s in live if s.in_flight < s.backend.max_concurrency]
        if not roomy:
            return self._saturated(request, now)
        plan = self.choose(roomy, request, now)
        if plan.action == "dispatch" and plan.backend is not None:
            self._record(plan, request, now)
        return plan

    def _saturated(self, request: RouteRequest, now: float) -> RoutePlan:
        """Every usable backend holds ``max_concurrency`` requests: classes 0 and 1 get a wait plan
        (``until_freed``, ``wait_s`` = ``SATURATED_POLL_S``) while their SLO budget lasts; raises ``Shed`` once
        it is spent, and at once for class 2 and lower, which would otherwise take the slots
        that free up from the more important classes waiting for them."""
        if request.priority >= 2:
            # ``quoted``: a class of more than 4,300 digits has no ``str`` (until review R84 its
            # shed was a ``ValueError``); any class over 1 is shed alike.
            raise Shed(
                f"every backend serving {request.model!r} is at its max_concurrency; "
                f"class {quoted(request.priority)} shed",
                retry_after_s=1.0,
            )
        budget = request.slo_ttft_s - max(0.0, now - request.arrived_at)
        if not budget > 0:  # NaN too: an SLO that is no number never waits forever
            raise Shed(
                f"every backend serving {request.model!r} is at its max_concurrency "
                f"for longer than the SLO ({request.slo_ttft_s:.2f}s)",
                retry_after_s=1.0,
            )
        return RoutePlan(
            request_id=request.id,
            action="wait",
            backend=None,
            predicted_ttft_s=0.0,
            meets_slo=False,
            cached_tokens=0,
            reason="every backend is at its max_concurrency; waits for a slot",
            wait_s=min(SATURATED_POLL_S, budget),
            until_freed=True,
        )

    @abstractmethod
    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        """Pick among ``candidates`` (never empty); may return a wait plan or raise ``Shed``."""

    def _record(self, plan: RoutePlan, request: RouteRequest, now: float) -> None:
        assert plan.backend is not None
        state = self.states[plan.backend]
        cached = state.cached_tokens(request.prefix_hashes, request.prompt_tokens)
        seconds = state.speed.prefill_s(request.prompt_tokens - cached, cached)
        state.dispatched(
            request.id,
            request.prefix_hashes,
            request.prompt_tokens,
            request.max_output_tokens,
            cached,
            seconds,
        )
        waited = max(0.0, now - request.arrived_at)
        self._inflight[request.id] = _Dispatch(plan.backend, now, max(0.0, plan.predicted_ttft_s - waited))

    def plan(
        self,
        state: BackendState,
        request: RouteRequest,
        reason: str,
        predicted: float = 0.0,
        candidates: tuple[Candidate, ...] = (),
        debited: float = 0.0,
    ) -> RoutePlan:
        """A dispatch plan to ``state``'s backend (``candidates``: every backend's prediction, for
        logging; ``debited``: what the dispatch took from the tenant's token bucket)."""
        return RoutePlan(
            request_id=request.id,
            action="dispatch",
            backend=state.name,
            predicted_ttft_s=predicted,
            meets_slo=predicted <= request.slo_ttft_s,
            cached_tokens=state.cached_tokens(request.prefix_hashes, request.prompt_tokens),
            reason=reason,
            candidates=candidates,
            debited=debited,
        )

    # --- what happened -------------------------------------------------------------------

    def first_token(self, request_id: str, now: float) -> None:
        """The request's first token arrived."""
        d = self._inflight.get(request_id)
        if d is not None:
            self.states[d.backend].first_token(request_id)
            self.on_first_token(d.backend, now - d.at, d.predicted_s)

    def on_first_token(self, backend: str, ttft_s: float, predicted_s: float) -> None:
        """Hook for policies that learn from observed TTFT; the default learns nothing."""
        return None

    def finished(self, request_id: str, now: float) -> None:
        """The request ended, successfully or not; it no longer counts anywhere."""
        d = self._inflight.pop(request_id, None)
        if d is not None:
            self.states[d.backend].finished(request_id)

    def withdraw(self, request_id: str) -> None:
        """The request stopped waiting for a slot (its caller gave up, e.g. its task was
        cancelled while it waited): a policy that keeps waiters in line drops it at once. The
        default keeps no line; unknown ids are ignored."""
        return None

    def due(self, now: float) -> list[str] | None:
        """The waiting requests that the slots free now are theirs (those worth waking to ask
        again), or ``None`` when the policy keeps no line and every waiter should ask."""
        return None

    def observe(self, backend: str, load: EngineLoad) -> None:
        """New metrics scraped from ``backend``."""
        self.states[backend].observe(load)

    def mark_down(self, backend: str) -> None:
        """The backend failed: skip it until ``mark_up``; its cached prefixes are forgotten (it
        may have restarted). The calls still running there stay counted until their callers
        report them ``finished``, as every caller does whether a call completes or fails: one
        failed call does not stop the others, and a backend back from a blip must not look
        idle, or ``max_concurrency`` would be exceeded."""
        state = self.states[backend]
        state.healthy = False
        state.index.clear()

    def mark_up(self, backend: str) -> None:
        """The backend answers its health check again."""
        self.states[backend].healthy = True

    def in_flight(self, backend: str) -> int:
        """Requests outstanding on ``backend``."""
        return self.states[backend].in_flight
