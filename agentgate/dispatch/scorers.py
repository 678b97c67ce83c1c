"""Routing scorers: small composable estimates of what a backend would cost a request.

A scorer maps (backend state, request, now) to a number where lower is better. The agentgate
router's scorers are in seconds and add up to a predicted time to first token::

    predicted_ttft = QueuedPrefill() + UncachedPrefill() + DecodeInterference() + KvPressure()

optionally wrapped in ``Calibrated`` (scaled by the per-backend correction learned from observed
first tokens).

``a + b`` adds two scorers, ``w * a`` weights one, so a new signal is a new class, not a new
branch in the router (tenacity's ``stop | stop`` style).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from agentgate.dispatch.state import BackendState

if TYPE_CHECKING:
    from agentgate.dispatch.router import RouteRequest


class Scorer(ABC):
    """Lower is better."""

    @abstractmethod
    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        """The score of sending ``request`` to ``state``'s backend at ``now``."""

    def __add__(self, other: Scorer) -> Scorer:
        return Sum((self, other))

    def __rmul__(self, weight: float) -> Scorer:
        return Weighted(weight, self)


class Sum(Scorer):
    """The sum of several scorers."""

    def __init__(self, parts: tuple[Scorer, ...]) -> None:
        flat: list[Scorer] = []
        for part in parts:
            flat.extend(part.parts if isinstance(part, Sum) else (part,))
        self.parts: tuple[Scorer, ...] = tuple(flat)

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        return sum(part(state, request, now) for part in self.parts)


class Weighted(Scorer):
    """A scorer times a constant."""

    def __init__(self, weight: float, inner: Scorer) -> None:
        self.weight = weight
        self.inner = inner

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        return self.weight * self.inner(state, request, now)


class QueuedPrefill(Scorer):
    """Seconds of prefill already queued there: what this router sent and is not yet prefilled,
    plus requests other clients queued there (each costed like this prompt)."""

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        extra = state.extra_waiting(now)
        if extra:
            return state.queued_prefill_s + extra * state.speed.prefill_s(request.prompt_tokens, 0)
        return state.queued_prefill_s


class UncachedPrefill(Scorer):
    """Seconds to compute the part of this prompt not already cached there."""

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        cached = state.cached_tokens(request.prefix_hashes, request.prompt_tokens)
        return state.speed.prefill_s(request.prompt_tokens - cached, cached)


class DecodeInterference(Scorer):
    """Seconds that running decodes add: the prefill shares each step with every decoding request
    (weights read once per step, plus each decoder's KV read), over as many steps as the chunked
    prefill of the queued work and this prompt takes."""

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        sp = state.speed
        n_dec = state.engine_running(now)
        cached = state.cached_tokens(request.prefix_hashes, request.prompt_tokens)
        work = state.queued_prefill_tokens + request.prompt_tokens - cached
        per_step = max(1.0, sp.max_batched_tokens - n_dec)
        steps = max(1, math.ceil(work / per_step))
        mean_ctx = state.decode_context / len(state.decoding) if state.decoding else 0.0
        return steps * (sp.base_s + sp.decode_seq_s * n_dec + sp.kv_read_s * mean_ctx * n_dec)


class KvPressure(Scorer):
    """Seconds to wait for KV memory when the prompt does not fit beside what runs there: until
    enough decoding requests finish (estimated from their mean remaining output)."""

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        cached = state.cached_tokens(request.prefix_hashes, request.prompt_tokens)
        need = request.prompt_tokens - cached + request.max_output_tokens
        free = state.kv_capacity_tokens - state.kv_used_tokens(now)
        if need <= free or not state.decoding:
            return 0.0
        sp = state.speed
        n_dec = max(1.0, state.engine_running(now))
        step = sp.base_s + sp.decode_seq_s * n_dec + sp.kv_read_s * state.decode_context
        mean_output = sum(out for _, out in state.decoding.values()) / len(state.decoding)
        deficit_share = min(1.0, (need - free) / max(1.0, state.kv_capacity_tokens))
        return step * mean_output * (0.5 + deficit_share)


class Calibrated(Scorer):
    """An estimate scaled by the backend's learned correction (observed / predicted TTFT)."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        return state.correction * self.inner(state, request, now)


def predicted_ttft(*, calibrated: bool = False) -> Scorer:
    """The agentgate router's TTFT predictor; ``calibrated`` scales it by each backend's learned
    correction, for pools whose ``SpeedModel`` is not known well (on the simulated pool, where it
    is, the correction only adds noise: docs/dispatch.md)."""
    core = QueuedPrefill() + UncachedPrefill() + DecodeInterference() + KvPressure()
    return Calibrated(core) if calibrated else core
