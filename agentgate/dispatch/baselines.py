"""The routers agentgate is compared against, each implemented from its documented rule.

Every baseline is a ``RoutingPolicy`` and so sees exactly what the agentgate router sees: its own
dispatch accounting, first tokens, completions and the engines' scraped metrics. Where a
baseline tracks prefixes it gets the same router-side block index (the approximate,
routing-decision-based mode each of them offers). Sources are cited in docs/dispatch.md.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping

from agentgate.dispatch._policy import RoutePlan, RouteRequest, RoutingPolicy
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.prefix_index import PrefixIndex
from agentgate.dispatch.state import BackendState, SpeedModel
from agentgate.errors import Shed


class RandomRouter(RoutingPolicy):
    """Uniformly random backend (LiteLLM ``simple-shuffle``, Dynamo ``random``)."""

    name = "random"

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        return self.plan(self.rng.choice(candidates), request, "random")


class RoundRobinRouter(RoutingPolicy):
    """Each backend in turn."""

    name = "round-robin"

    def __init__(self, inventory: Inventory, **kwargs: object) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self._next = 0

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        state = candidates[self._next % len(candidates)]
        self._next += 1
        return self.plan(state, request, "round robin")


class LeastBusyRouter(RoutingPolicy):
    """LiteLLM ``least-busy``: the deployment with the fewest requests in flight (the router's
    own count, raised at dispatch and lowered at completion); ties broken at random."""

    name = "litellm-least-busy"

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        low = min(s.in_flight for s in candidates)
        return self.plan(
            self.rng.choice([s for s in candidates if s.in_flight == low]), request, "least busy"
        )


class LowestLatencyRouter(RoutingPolicy):
    """LiteLLM ``latency-based-routing``: the deployment with the lowest average of its recent
    latencies (time to first token for streaming calls, the last 10 kept); a deployment with no
    history scores 0 and is tried first; ties broken at random (``lowest_latency_buffer`` 0)."""

    name = "litellm-latency"

    def __init__(self, inventory: Inventory, **kwargs: object) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self._history: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=10))

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        def avg(s: BackendState) -> float:
            h = self._history[s.name]
            return sum(h) / len(h) if h else 0.0

        low = min(avg(s) for s in candidates)
        return self.plan(self.rng.choice([s for s in candidates if avg(s) == low]), request, "lowest latency")

    def on_first_token(self, backend: str, ttft_s: float, predicted_s: float) -> None:
        self._history[backend].append(ttft_s)


class SGLangCacheAwareRouter(RoutingPolicy):
    """SGLang router ``cache_aware``: if the load (requests in flight per worker) is imbalanced,
    ``max - min > balance_abs_threshold`` and ``max > balance_rel_threshold * min``, pick the
    least loaded worker; otherwise match the prompt against each worker's approximate prefix
    tree and pick the best match if its match rate exceeds ``cache_threshold``, else the worker
    with the smallest tree. Each worker's tree holds what was routed to it, LRU-trimmed to
    ``max_tree_size`` characters (4 per token here)."""

    name = "sglang-cache-aware"

    def __init__(
        self,
        inventory: Inventory,
        *,
        balance_abs_threshold: int = 32,
        balance_rel_threshold: float = 1.0001,
        cache_threshold: float = 0.5,
        max_tree_size: int = 2**24,
        **kwargs: object,
    ) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold
        self.cache_threshold = cache_threshold
        blocks = max(1, max_tree_size // 4 // self.block_tokens)
        self._trees = {name: PrefixIndex(blocks) for name in self.states}

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        loads = [s.in_flight for s in candidates]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.abs_threshold and hi > self.rel_threshold * lo:
            state = min(candidates, key=lambda s: s.in_flight)
            reason = "imbalanced: shortest queue"
        else:
            matches = {s.name: self._trees[s.name].match(request.prefix_hashes) for s in candidates}
            best = max(candidates, key=lambda s: matches[s.name])
            rate = matches[best.name] * self.block_tokens / max(1, request.prompt_tokens)
            if rate > self.cache_threshold:
                state, reason = best, f"prefix match {rate:.2f}"
            else:
                state = min(candidates, key=lambda s: len(self._trees[s.name]))
                reason = "low match: smallest tree"
        self._trees[state.name].record(request.prefix_hashes)
        return self.plan(state, request, reason)

    def mark_down(self, backend: str) -> None:
        super().mark_down(backend)
        self._trees[backend].clear()


class LlmdRouter(RoutingPolicy):
    """llm-d inference scheduler, default profile: ``prefix-cache-scorer`` (weight 3, fraction of
    the prompt's blocks found in the router's LRU index of what it sent there),
    ``queue-scorer`` (weight 2, waiting requests from the scraped metrics, min-max normalised,
    fewer is better) and ``kv-cache-utilization-scorer`` (weight 2, 1 - scraped KV usage);
    ``max-score-picker`` (ties at random)."""

    name = "llm-d"

    def __init__(
        self,
        inventory: Inventory,
        *,
        prefix_weight: float = 3.0,
        queue_weight: float = 2.0,
        kv_weight: float = 2.0,
        **kwargs: object,
    ) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self.weights = (prefix_weight, queue_weight, kv_weight)

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        queues = {}
        for s in candidates:
            load = s.fresh_load(now)
            queues[s.name] = load.waiting if load is not None and load.waiting is not None else 0.0
        qmax, qmin = max(queues.values()), min(queues.values())
        n_blocks = max(1, len(request.prefix_hashes))
        best_score, best = -1.0, []
        for s in candidates:
            prefix = s.index.match(request.prefix_hashes) / n_blocks
            queue = 1.0 if qmax == qmin else (qmax - queues[s.name]) / (qmax - qmin)
            load = s.fresh_load(now)
            kv = 1.0 - (load.kv_usage if load is not None and load.kv_usage is not None else 0.0)
            score = self.weights[0] * prefix + self.weights[1] * queue + self.weights[2] * kv
            if score > best_score + 1e-12:
                best_score, best = score, [s]
            elif abs(score - best_score) <= 1e-12:
                best.append(s)
        return self.plan(self.rng.choice(best), request, f"max score {best_score:.2f}")


class DynamoKvRouter(RoutingPolicy):
    """NVIDIA Dynamo KV router: ``logit = overlap_score_weight x potential_prefill_blocks +
    potential_active_blocks``, lowest wins (temperature 0). Prefill blocks: the prompt's blocks
    not overlapping the worker's cache; active blocks: the blocks of the requests the router
    has active there plus this one's. Cache overlap from routing decisions (the
    ``--no-kv-events`` approximate mode)."""

    name = "dynamo-kv"

    def __init__(self, inventory: Inventory, *, overlap_score_weight: float = 1.0, **kwargs: object) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self.overlap_score_weight = overlap_score_weight

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        bt = self.block_tokens
        request_blocks = -(-(request.prompt_tokens + request.max_output_tokens) // bt)

        def logit(s: BackendState) -> float:
            overlap = min(s.index.match(request.prefix_hashes) * bt, request.prompt_tokens)
            prefill_blocks = (request.prompt_tokens - overlap) / bt
            active = (s.decode_context + sum(p.context for p in s.prefilling.values())) / bt
            return self.overlap_score_weight * prefill_blocks + active + request_blocks

        best = min(logit(s) for s in candidates)
        pick = self.rng.choice([s for s in candidates if logit(s) == best])
        return self.plan(pick, request, f"min logit {best:.1f}")


class MooncakeRouter(RoutingPolicy):
    """Mooncake Conductor, Algorithm 1 (FAST'25), without KV transfer between instances (the
    simulated pool has no shared KV store, so this is the paper's local cache-aware variant): for
    each prefill instance, TTFT = queue time + prefill time of the uncached part of the prompt;
    pick the minimum; reject the request if even that exceeds its TTFT SLO."""

    name = "mooncake"

    def __init__(self, inventory: Inventory, *, reject_over_slo: bool = True, **kwargs: object) -> None:
        super().__init__(inventory, **kwargs)  # type: ignore[arg-type]
        self.reject_over_slo = reject_over_slo

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        def ttft(s: BackendState) -> float:
            cached = s.cached_tokens(request.prefix_hashes, request.prompt_tokens)
            return s.queued_prefill_s + s.speed.prefill_s(request.prompt_tokens - cached, cached)

        best = min(candidates, key=ttft)
        t = ttft(best)
        if self.reject_over_slo and t > request.slo_ttft_s:
            raise Shed(
                f"predicted TTFT {t:.2f}s over SLO {request.slo_ttft_s:.2f}s", retry_after_s=max(1.0, t)
            )
        return self.plan(best, request, "min queue + prefill", predicted=t)


class LoadBalancedRouter(RoutingPolicy):
    """Mooncake's "load-balanced" reference: the instance with the least queued prefill time,
    ignoring the cache."""

    name = "load-balanced"

    def choose(self, candidates: list[BackendState], request: RouteRequest, now: float) -> RoutePlan:
        return self.plan(min(candidates, key=lambda s: s.queued_prefill_s), request, "least queued prefill")


BASELINES: Mapping[str, type[RoutingPolicy]] = {
    cls.name: cls
    for cls in (
        RandomRouter,
        RoundRobinRouter,
        LeastBusyRouter,
        LowestLatencyRouter,
        SGLangCacheAwareRouter,
        LlmdRouter,
        DynamoKvRouter,
        MooncakeRouter,
        LoadBalancedRouter,
    )
}
"""Every baseline by name."""

__all__ = [
    "BASELINES",
    "DynamoKvRouter",
    "LeastBusyRouter",
    "LlmdRouter",
    "LoadBalancedRouter",
    "LowestLatencyRouter",
    "MooncakeRouter",
    "RandomRouter",
    "RoundRobinRouter",
    "SGLangCacheAwareRouter",
    "SpeedModel",
]
