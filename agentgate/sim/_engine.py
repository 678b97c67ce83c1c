"""A vLLM-like engine core: continuous batching under a chunked-prefill token budget.

Each step (one forward pass) the scheduler, like vLLM V1's:
1. gives every running request what it needs, oldest first: one token to a decoding request, the
   next chunk to a request still in prefill, within the step's token budget. A decoding request
   that needs KV memory when the cache is full preempts the newest running request (recompute:
   its KV is dropped and it goes back to the head of the queue to prefill prompt + output again);
2. admits waiting requests in FCFS order while the budget, ``max_num_seqs`` and KV memory allow,
   reusing the longest cached prefix of each prompt (block hashes) and prefilling the rest in
   chunks. A request whose KV does not fit blocks the queue (no skipping), as in vLLM.

The step's duration comes from the ``LatencyModel``. The step that completes a prompt samples the
first token; every later step adds one token. The same engine runs under the discrete-event
simulator (simulated time) and behind the HTTP server (scaled wall-clock time).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from agentgate._shown import quoted, shown
from agentgate.errors import InputError
from agentgate.sim._kvcache import KVCache
from agentgate.sim._latency import MAX_KV_CAPACITY_TOKENS, PROFILES, LatencyModel


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler limits; defaults follow vLLM V1's online-serving defaults."""

    max_num_seqs: int = 256
    """Most requests in the running batch."""
    max_num_batched_tokens: int = 8192
    """Token budget of one step (chunked prefill)."""
    block_tokens: int = 16
    """Tokens per hashed KV block (the prefix-cache granularity)."""
    kv_capacity_tokens: int | None = None
    """KV capacity; ``None`` takes the latency model's."""

    def __post_init__(self) -> None:
        """Refuse (``InputError``) a limit that is not an integer of 1 or more: with one under 1
        no request could ever be scheduled (a token budget or batch of 0 left every request
        waiting for ever), and a KV capacity of 0 was silently read as the model's. Until review
        R66 only the range was checked: text raised a bare ``TypeError`` from the comparison,
        and a fraction was taken (``block_tokens=2.5`` failed inside the engine's first step,
        and the HTTP server's chat requests with a 500). ``block_tokens`` and ``kv_capacity_tokens``,
        which ``SimServer``'s ``/metrics`` publishes, are at most ``MAX_KV_CAPACITY_TOKENS`` (10**12):
        until review R90 one of more than 4,300 digits, which has no ``str``, made every ``/metrics``
        request a 500."""
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_tokens", "kv_capacity_tokens"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be an integer of 1 or more, not {quoted(value, 40)}")
            if name in ("block_tokens", "kv_capacity_tokens") and value > MAX_KV_CAPACITY_TOKENS:
                raise InputError(
                    f"{name} must be at most 10**12 tokens (MAX_KV_CAPACITY_TOKENS), not {quoted(value, 40)}"
                )


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request inside the engine; its progress fields are the engine's to change."""

    id: str
    prompt_tokens: int
    output_tokens: int
    hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full blocks (block size = the engine's ``block_tokens``)."""
    arrival: float = 0.0
    prefilled: int = 0
    prefill_target: int = 0
    generated: int = 0
    cached_tokens: int = 0
    private: int = 0
    held: list[int] = field(default_factory=list)
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0

    @property
    def context(self) -> int:
        """Tokens of KV the request attends to."""
        return self.prompt_tokens + self.generated


@dataclass(slots=True)
class StepResult:
    """What one step did: its duration and the requests that got tokens or finished."""

    duration: float
    first_token: list[SimRequest]
    decoded: list[SimRequest]
    finished: list[SimRequest]


def check_engine_arguments(model: object, config: object) -> None:
    """Raise ``InputError`` naming the argument for a ``model`` that is not a ``LatencyModel`` (a
    profile's name names the known ones: ``PROFILES`` is keyed by name, and passing the name is
    an easy mistake) or a ``config`` neither an ``EngineConfig`` nor ``None`` (a dict of its
    settings is none). Until review R87 either failed later with a bare ``AttributeError``, and
    an empty dict was silently read as the default settings."""
    if not isinstance(model, LatencyModel):
        if isinstance(model, str):
            known = ", ".join(map(repr, PROFILES))
            raise InputError(
                f"model must be a LatencyModel, not the text {quoted(model)} (a built-in profile by "
                f"its name is PROFILES[name]; the known names: {known})"
            )
        raise InputError(f"model must be a LatencyModel, not {shown(model)}")
    if config is not None and not isinstance(config, EngineConfig):
        raise InputError(
            f"config must be an EngineConfig or None, not {shown(config)} (EngineConfig(**settings) "
            "makes one of a dict)"
        )


def _tokens(count: int) -> str:
    """``count`` tokens as a refusal says it: a count past 128 bits by its size, as ``quoted``
    gives it (a count of more than 4,300 digits has no ``str``), in words that read as a count."""
    if count.bit_length() <= 128:
        return f"{count} tokens"
    return f"{'a negative' if count < 0 else 'a'} number of tokens {count.bit_length()} bits long"


class Engine:
    """One simulated replica. Not thread-safe: one runner drives it."""

    def __init__(self, model: LatencyModel, config: EngineConfig | None = None) -> None:
        """Raises ``InputError`` for a ``model`` or ``config`` of another type
        (``check_engine_arguments``)."""
        check_engine_arguments(model, config)
        self.model = model
        self.config = config or EngineConfig()
        capacity = self.config.kv_capacity_tokens or model.kv_capacity_tokens
        self.kv = KVCache(capacity, self.config.block_tokens)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self._by_id: dict[str, SimRequest] = {}

    # --- queue ---------------------------------------------------------------------------

    def add(self, request: SimRequest) -> None:
        """Queue a request (FCFS); an output length under one token is taken as one.

        Raises ``InputError``, queuing nothing, for a prompt of no tokens (vLLM refuses an empty
        prompt at its API; until review R66 one of 0 tokens was prefilled in a chunk of 0 tokens,
        outside the step's token budget, and had its first token for no work), or a request that
        could never finish: its prompt and output need more KV than the whole cache holds (it
        would block the FCFS queue for good; vLLM refuses it at its API, ``max_model_len``). Also
        for a token count that is not an integer (a bool is none): until review R87 a prompt of
        NaN tokens was queued and never prefilled (its steps took NaN seconds, for ever), and one
        of 2.5 failed the first step with a bare ``TypeError``.
        """
        where = f"request {quoted(request.id)}"
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(request, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where}: {name} must be an integer, not {shown(value)}")
        if request.prompt_tokens < 1:
            raise InputError(
                f"{where}: a prompt of {_tokens(request.prompt_tokens)} (an empty prompt cannot be served)"
            )
        needed = request.prompt_tokens + max(1, request.output_tokens) - 1  # the last token needs no KV
        if needed > self.kv.capacity:
            need = f"{needed} tokens of KV, more than" if needed.bit_length() <= 128 else "more KV than"
            raise InputError(
                f"{where}: a prompt of {_tokens(request.prompt_tokens)} and an output of "
                f"{_tokens(request.output_tokens)} need {need} the cache holds ({self.kv.capacity} tokens)"
            )
        request.output_tokens = max(1, request.output_tokens)
        request.prefill_target = request.prompt_tokens
        self.waiting.append(request)
        self._by_id[request.id] = request

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its KV; False if the engine does not hold it."""
        req = self._by_id.pop(request_id, None)
        if req is None:
            return False
        if req in self.running:
            self.running.remove(req)
            self._release(req)
        else:
            self.waiting.remove(req)
        return True

    def has_work(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.waiting or self.running)

    # --- one step ------------------------------------------------------------------------

    def step(self, now: float) -> StepResult:
        """Schedule and run one step starting at ``now``; token times are ``now + duration``."""
        budget = self.config.max_num_batched_tokens
        n_decode = 0
        decode_ctx = 0
        prefill_tokens = 0
        pairs = 0
        chunks: list[tuple[SimRequest, int]] = []
        decoders: list[SimRequest] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.prefilled >= req.prefill_target:
                if not self._grow(req):
                    continue  # ``req`` itself was preempted; the list shifted
                decoders.append(req)
                n_decode += 1
                decode_ctx += req.context
                budget -= 1
            else:
                chunk = min(req.prefill_target - req.prefilled, budget)
                chunks.append((req, chunk))
                pairs += chunk * req.prefilled + chunk * (chunk + 1) // 2
                prefill_tokens += chunk
                budget -= chunk
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            if not self._admit(req):
                break
            self.waiting.popleft()
            self.running.append(req)
            chunk = min(req.prefill_target - req.prefilled, budget)
            chunks.append((req, chunk))
            pairs += chunk * req.prefilled + chunk * (chunk + 1) // 2
            prefill_tokens += chunk
            budget -= chunk
        duration = self.model.step_time(n_decode, decode_ctx, prefill_tokens, pairs)
        end = now + duration
        result = StepResult(duration, [], [], [])
        for req in decoders:
            req.generated += 1
            result.decoded.append(req)
        for req, chunk in chunks:
            req.prefilled += chunk
            if req.prefilled >= req.prefill_target:
                self._prompt_done(req)
                if req.first_token_at is None:
                    req.first_token_at = end
                    result.first_token.append(req)
                else:  # a preempted request's recompute: its next token (the server streams it)
                    result.decoded.append(req)
                req.generated += 1
        for req in [*decoders, *(r for r, _ in chunks)]:
            if req.generated >= req.output_tokens and req.finished_at is None:
                req.finished_at = end
                result.finished.append(req)
        self._retire(result.finished)
        return result

    def decode_run(self, now: float, until: float) -> StepResult | None:
        """Run several pure-decode steps at once while nothing else can change the batch.

        Applies only when no request waits and every running one is decoding; stops at the first
        step that ends at or after ``until``, at the first completion, or before KV would run out.
        Returns ``None`` when it does not apply (call ``step``). Token times of all but the last
        step are not reported, which only the discrete-event runner may accept.
        """
        if self.waiting or not self.running:
            return None
        if any(r.prefilled < r.prefill_target for r in self.running):
            return None
        b = len(self.running)
        k_max = min(r.output_tokens - r.generated for r in self.running)
        k_max = min(k_max, self.kv.available() // b)
        if k_max < 2:
            return None
        ctx = sum(r.context for r in self.running)
        m = self.model
        t = now
        k = 0
        while k < k_max:
            t += m.step_time(b, ctx + k * b, 0, 0)
            k += 1
            if t >= until:
                break
        self.kv.allocate(k * b)
        result = StepResult(t - now, [], list(self.running), [])
        for req in self.running:
            req.private += k
            req.generated += k
            if req.generated >= req.output_tokens:
                req.finished_at = t
                result.finished.append(req)
        self._retire(result.finished)
        return result

    def _retire(self, finished: list[SimRequest]) -> None:
        """Take finished requests out of the batch and give back their KV blocks."""
        for req in finished:
            self.running.remove(req)
            self._release(req)
            self._by_id.pop(req.id, None)

    def metrics(self) -> dict[str, float]:
        """The engine's gauges and counters under vLLM's Prometheus names."""
        return {
            "vllm:num_requests_running": float(len(self.running)),
            "vllm:num_requests_waiting": float(len(self.waiting)),
            "vllm:kv_cache_usage_perc": self.kv.usage,
            "vllm:prefix_cache_queries": float(self.prefix_queries),
            "vllm:prefix_cache_hits": float(self.prefix_hits),
            "vllm:num_preemptions": float(self.preemptions),
        }

    # --- KV bookkeeping ------------------------------------------------------------------

    def _admit(self, req: SimRequest) -> bool:
        usable = req.hashes[: max(0, (req.prompt_tokens - 1) // self.config.block_tokens)]
        hit = self.kv.match(usable)
        cached = hit * self.config.block_tokens
        need = req.prefill_target - cached
        self.kv.acquire(usable[:hit])  # before allocating, so eviction cannot take the hit blocks
        if not self.kv.allocate(need):
            self.kv.release(usable[:hit])
            return False
        req.held = list(usable[:hit])
        req.private = need
        req.prefilled = cached
        if req.preemptions == 0:
            # A preempted request's re-admission reuses what the cache still holds (above), but
            # those blocks are mostly its own KV, released by the preemption: as vLLM V1 does, its
            # usage keeps the first admission's cached tokens and the prefix-cache counters count
            # first admissions only (vLLM counts re-admissions apart, as preempted queries/hits).
            req.cached_tokens = cached
            self.prefix_queries += req.prompt_tokens
            self.prefix_hits += cached
        return True

    def _prompt_done(self, req: SimRequest) -> None:
        full = min(req.prompt_tokens // self.config.block_tokens, len(req.hashes))
        new = req.hashes[len(req.held) : full]
        req.held.extend(self.kv.promote(new))
        req.private -= len(new) * self.config.block_tokens

    def _grow(self, req: SimRequest) -> bool:
        """Find KV for one more token of ``req``, preempting the newest running requests."""
        while not self.kv.allocate(1):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is req:
                return False
        req.private += 1
        return True

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        self._release(req)
        req.prefilled = 0
        req.prefill_target = req.prompt_tokens + req.generated
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)

    def _release(self, req: SimRequest) -> None:
        self.kv.release(req.held)
        self.kv.free(req.private)
        req.held = []
        req.private = 0
