"""What the router knows about one backend: its own accounting plus the engine's last metrics.

In-flight work is counted at dispatch, not at the next scrape: a request is "prefilling" from the
moment it is sent until its first token, then "decoding" until it ends. Engine metrics (scraped
on an interval, so stale by up to that interval) add the work the engine reported beyond what
this router had outstanding at scrape time (other clients' requests); when metrics are missing
or stale the router's own accounting stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from agentgate._numbers import check_finite_non_negative
from agentgate._shown import quoted
from agentgate.dispatch.inventory import MAX_KV_CAPACITY_TOKENS, Backend
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.prefix_index import PrefixIndex
from agentgate.errors import InputError

DEFAULT_KV_CAPACITY_TOKENS = 100_000
"""Assumed KV capacity of a backend that declares none and publishes no cache size."""


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """The router's estimate of one backend's step costs (seconds); see docs/dispatch.md.

    Raises ``InputError`` naming the field when a step cost is not a finite number >= 0 or
    ``max_batched_tokens`` is not a whole number from 1 to ``MAX_KV_CAPACITY_TOKENS`` (a step
    batches no more than a cache holds; until review R84 unchecked: ``base_s`` or
    ``max_batched_tokens`` of ``10**400`` raised an untyped ``OverflowError`` at the first routed
    call, text a ``TypeError``)."""

    base_s: float = 4.6e-3
    decode_seq_s: float = 0.018e-3
    kv_read_s: float = 0.039e-6
    prefill_token_s: float = 30e-6
    attention_pair_s: float = 1.05e-9
    max_batched_tokens: int = 8192

    def __post_init__(self) -> None:
        for setting in fields(self):
            value = getattr(self, setting.name)
            if setting.name != "max_batched_tokens":
                check_finite_non_negative(value, f"SpeedModel {setting.name}")
            elif (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 1 <= value <= MAX_KV_CAPACITY_TOKENS
            ):
                raise InputError(
                    f"SpeedModel max_batched_tokens must be a whole number from 1 to "
                    f"{MAX_KV_CAPACITY_TOKENS:,}, got {quoted(value)}"
                )

    def prefill_s(self, uncached: int, cached: int) -> float:
        """Seconds of compute to prefill ``uncached`` tokens after ``cached`` ones."""
        pairs = uncached * cached + uncached * (uncached + 1) / 2
        return self.prefill_token_s * uncached + self.attention_pair_s * pairs


@dataclass(slots=True)
class _Prefill:
    uncached: int
    seconds: float
    context: int
    output: int


@dataclass(slots=True)
class BackendState:
    """Live view of one backend, owned and updated by one router."""

    backend: Backend
    speed: SpeedModel
    index: PrefixIndex
    block_tokens: int
    healthy: bool = True
    load: EngineLoad | None = None
    metrics_max_age_s: float = 2.0
    correction: float = 1.0
    prefilling: dict[str, _Prefill] = field(default_factory=dict)
    decoding: dict[str, tuple[int, int]] = field(default_factory=dict)
    queued_prefill_s: float = 0.0
    queued_prefill_tokens: int = 0
    foreign_running: float = 0.0
    foreign_waiting: float = 0.0
    decode_context: int = 0
    _last_queries: float | None = None
    _last_hits: float | None = None
    _predicted_hit_tokens: float = 0.0
    _predicted_query_tokens: float = 0.0

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def kv_capacity_tokens(self) -> int:
        """Declared capacity, else the engine's published one, else the default. Both are at
        most ``MAX_KV_CAPACITY_TOKENS``: the inventory refuses a larger declared one when it
        loads, and a scrape that publishes one fails (the router multiplies it by floats)."""
        if self.backend.kv_capacity_tokens is not None:
            return self.backend.kv_capacity_tokens
        if self.load is not None and self.load.kv_capacity_tokens:
            return self.load.kv_capacity_tokens
        return DEFAULT_KV_CAPACITY_TOKENS

    @property
    def in_flight(self) -> int:
        """Requests this router has outstanding here."""
        return len(self.prefilling) + len(self.decoding)

    def fresh_load(self, now: float) -> EngineLoad | None:
        """The engine's metrics if recent enough to trust, else ``None``."""
        if self.load is None or now - self.load.scraped_at > self.metrics_max_age_s:
            return None
        return self.load

    def engine_running(self, now: float) -> float:
        """Requests decoding: ours plus those other clients had running at the last fresh scrape."""
        foreign = self.foreign_running if self.fresh_load(now) is not None else 0.0
        return len(self.decoding) + foreign

    def extra_waiting(self, now: float) -> float:
        """Requests queued at the engine that this router did not send (other clients)."""
        return self.foreign_waiting if self.fresh_load(now) is not None else 0.0

    def kv_used_tokens(self, now: float) -> float:
        """KV held by running requests: the engine's figure when fresh, else our estimate."""
        ours = float(self.decode_context + sum(p.context for p in self.prefilling.values()))
        load = self.fresh_load(now)
        if load is not None and load.kv_usage is not None:
            return max(load.kv_usage * self.kv_capacity_tokens, min(ours, self.kv_capacity_tokens))
        return ours

    def cached_tokens(self, hashes: tuple[int, ...], prompt_tokens: int) -> int:
        """Tokens of this prompt believed cached here, discounted by the index's confidence."""
        matched = self.index.match(hashes) * self.block_tokens
        return int(min(matched, max(0, prompt_tokens - 1)) * self.index.confidence)

    # --- events --------------------------------------------------------------------------

    def dispatched(
        self, request_id: str, hashes: tuple[int, ...], prompt: int, output: int, cached: int, seconds: float
    ) -> None:
        """A request was sent here: count it and remember its prefix."""
        self.prefilling[request_id] = _Prefill(prompt - cached, seconds, prompt, output)
        self.queued_prefill_s += seconds
        self.queued_prefill_tokens += prompt - cached
        self.index.record(hashes)
        self._predicted_hit_tokens += cached
        self._predicted_query_tokens += prompt

    def first_token(self, request_id: str) -> None:
        """The request finished its prefill."""
        p = self.prefilling.pop(request_id, None)
        if p is None:
            return
        self.queued_prefill_s = max(0.0, self.queued_prefill_s - p.seconds)
        self.queued_prefill_tokens = max(0, self.queued_prefill_tokens - p.uncached)
        self.decoding[request_id] = (p.context, p.output)
        self.decode_context += p.context

    def finished(self, request_id: str) -> None:
        """The request ended (completed, failed or cancelled)."""
        self.first_token(request_id)
        entry = self.decoding.pop(request_id, None)
        if entry is not None:
            self.decode_context -= entry[0]
        if not self.prefilling:
            self.queued_prefill_s = 0.0
            self.queued_prefill_tokens = 0

    def observe(self, load: EngineLoad) -> None:
        """New engine metrics; recalibrates the prefix index from the engine's hit counters."""
        if (
            load.prefix_queries is not None
            and load.prefix_hits is not None
            and self._last_queries is not None
            and self._last_hits is not None
        ):
            dq = load.prefix_queries - self._last_queries
            dh = load.prefix_hits - self._last_hits
            if dq > 0 and self._predicted_query_tokens > 0:
                predicted = self._predicted_hit_tokens / self._predicted_query_tokens
                self.index.calibrate(predicted, dh / dq)
                self._predicted_hit_tokens = 0.0
                self._predicted_query_tokens = 0.0
        if (
            load.prefix_queries is not None
            and self._last_queries is not None
            and load.prefix_queries < self._last_queries
        ):
            self.index.clear()  # counters went backwards: the engine restarted with an empty cache
        self._last_queries = load.prefix_queries
        self._last_hits = load.prefix_hits
        # Work the engine reports beyond ours, judged now, when the scrape is fresh: comparing a
        # stale scrape with later accounting would invent phantom requests.
        ours = len(self.prefilling) + len(self.decoding)
        if load.running is not None or load.waiting is not None:
            running, waiting = load.running or 0.0, load.waiting or 0.0
            self.foreign_waiting = max(0.0, waiting - len(self.prefilling))
            self.foreign_running = max(0.0, running + waiting - ours - self.foreign_waiting)
        self.load = load
        if self.backend.kv_capacity_tokens is None and load.kv_capacity_tokens:
            self.index.resize(self.kv_capacity_tokens // self.block_tokens)
