"""Engine metrics: Prometheus text from vLLM, SGLang, TGI and llama.cpp, read into one shape.

Each engine publishes its load under its own names; ``ENGINE_METRICS`` maps them onto the three
signals the router uses (running, waiting, KV usage) plus vLLM's prefix-cache counters and cache
size. Only the lines of those names are parsed, with ``prometheus_client``'s text parser (the
scrape runs on the dispatcher's event loop: an engine's hundreds of other series, or a backend
answering megabytes of them, must not stall it); a series with several label sets (the engines
of a data-parallel server, several models) is summed, and KV usage is averaged (the engines'
caches are equal: the mean is the server's fraction in use), but the KV capacity is read once
(each engine's sample already carries the server's total). Text over
``MAX_METRICS_CHARS``, a line of those names over ``MAX_METRICS_LINE_CHARS`` (the parser's time
on one line grows with the square of its labels or escaped quotes: bounding each line keeps the
whole parse linear in the text), lines of those names that do not parse, or text that carries
none of the engine's names raise ``BackendFailed``: a backend that answers garbage is a failed
backend, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agentgate.dispatch.inventory import MAX_KV_CAPACITY_TOKENS, Engine
from agentgate.errors import BackendFailed


@dataclass(frozen=True, slots=True)
class MetricNames:
    """The names one engine publishes its load under (``None``: not published)."""

    running: str | None
    waiting: str | None
    kv_usage: str | None
    prefix_queries: str | None = None
    prefix_hits: str | None = None


ENGINE_METRICS: dict[Engine, MetricNames] = {
    "vllm": MetricNames(
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        kv_usage="vllm:kv_cache_usage_perc",
        prefix_queries="vllm:prefix_cache_queries",
        prefix_hits="vllm:prefix_cache_hits",
    ),
    "sglang": MetricNames(
        running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs", kv_usage="sglang:token_usage"
    ),
    "tgi": MetricNames(running="tgi_batch_current_size", waiting="tgi_queue_size", kv_usage=None),
    "llamacpp": MetricNames(
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
        kv_usage="llamacpp:kv_cache_usage_ratio",
    ),
    "openai": MetricNames(running=None, waiting=None, kv_usage=None),
}
"""Engine -> the metric names it publishes (from each engine's /metrics documentation)."""

_FALLBACKS = {
    # vLLM's names before 0.9 (V0, and V1 up to 0.9.1 for the prefix counters), still served by
    # deployed engines: without them such an engine's prefix hits never correct the index.
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries": "vllm:gpu_prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:gpu_prefix_cache_hits",
}

MAX_METRICS_CHARS = 8 * 2**20
"""The longest metrics text read (8 Mi characters; a vLLM serving one model publishes about 100 kB):
a longer answer is a failed scrape, not seconds of parsing on the event loop."""

MAX_METRICS_LINE_CHARS = 16 * 2**10
"""The longest line of a read name parsed (16 Ki characters; an engine's lines are well under
1 KiB, ``vllm:cache_config_info`` with its twenty-odd labels the longest, and a model path in a
label at most 4 KiB): a longer one is a failed scrape, since ``prometheus_client`` parses a line
in time quadratic in its labels (one line of 128,000 labels, 1.4 MB, took 15 s)."""

MAX_REQUESTS = 10**7
"""The most requests an engine may report running or waiting: a larger count is garbage that would
make the router's estimates infinite."""


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """A backend's load as its engine last reported it."""

    running: float | None = None
    """Requests in the running batch."""
    waiting: float | None = None
    """Requests queued in the engine."""
    kv_usage: float | None = None
    """Fraction of KV cache held by running requests, 0..1."""
    prefix_queries: float | None = None
    """Cumulative prompt tokens looked up in the prefix cache."""
    prefix_hits: float | None = None
    """Cumulative prompt tokens found there."""
    kv_capacity_tokens: int | None = None
    """``block_size x num_gpu_blocks`` from ``vllm:cache_config_info``."""
    scraped_at: float = 0.0
    """When the scrape happened (the caller's clock)."""


def parse_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample in Prometheus text by name (counters also under their name without ``_total``).

    Raises ``BackendFailed`` if the text does not parse.
    """
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
                if sample.name.endswith("_total"):
                    out.setdefault(sample.name[: -len("_total")], []).append(
                        (dict(sample.labels), float(sample.value))
                    )
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise BackendFailed(f"metrics are not Prometheus text: {exc}") from None
    return out


def _read_names(engine: Engine) -> tuple[str, ...]:
    """The metric names ``load_from_text`` reads for ``engine`` (a counter's ``_total`` samples
    start with its name)."""
    names = ENGINE_METRICS[engine]
    read = [
        n
        for n in (names.running, names.waiting, names.kv_usage, names.prefix_queries, names.prefix_hits)
        if n is not None
    ]
    read += [_FALLBACKS[n] for n in read if n in _FALLBACKS]
    if engine == "vllm":
        read.append("vllm:cache_config_info")
    return tuple(read)


def load_from_text(text: str, engine: Engine, *, now: float = 0.0) -> EngineLoad:
    """Read an engine's Prometheus text into an ``EngineLoad``, parsing only the lines of the
    names it reads (comments and every other series are skipped unparsed).

    Raises ``BackendFailed`` if the text is longer than ``MAX_METRICS_CHARS``, or a line of those
    names is longer than ``MAX_METRICS_LINE_CHARS`` or does not parse, or an engine that publishes load metrics published none of them, or a
    value (any one sample of a series, before the series is summed or averaged) is not a finite
    non-negative number, or a request count is over ``MAX_REQUESTS``, or
    the published KV capacity is negative or over ``MAX_KV_CAPACITY_TOKENS``.
    """
    if len(text) > MAX_METRICS_CHARS:
        raise BackendFailed(f"metrics are over {MAX_METRICS_CHARS} characters ({len(text)})")
    read = _read_names(engine)
    kept: list[str] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.startswith(read):
            continue
        if len(line) > MAX_METRICS_LINE_CHARS:
            name = next(n for n in read if line.startswith(n))
            raise BackendFailed(
                f"metrics line {number} ({name}) is {len(line)} characters, over "
                f"{MAX_METRICS_LINE_CHARS}: no engine publishes such a line"
            )
        kept.append(line + "\n")
    samples = parse_samples("".join(kept))
    flat: dict[str, float] = {}
    for name, series in samples.items():
        values = [v for _, v in series]
        # Each sample, not only their sum or mean: -5 running on one engine and 7 on another sum
        # to a plausible 2.
        if (
            name in read
            and (bad := next((v for v in values if not math.isfinite(v) or v < 0), None)) is not None
        ):
            raise BackendFailed(f"metric {name} has an impossible value {bad!r}")
        flat[name] = (
            sum(values) / len(values)
            if name.endswith(("usage_perc", "token_usage", "ratio"))
            else sum(values)
        )
    load = load_from_values(flat, engine, now=now)
    info = samples.get("vllm:cache_config_info")
    # One sample, not their sum: a data-parallel vLLM (0.9 and later) publishes one per engine,
    # each with the server's ``num_gpu_blocks``, which it sums over its engines' own at their start.
    capacity = _kv_capacity(info[0][0]) if info else None
    if capacity is not None:
        load = EngineLoad(
            load.running,
            load.waiting,
            load.kv_usage,
            load.prefix_queries,
            load.prefix_hits,
            capacity,
            load.scraped_at,
        )
    return load


def _kv_capacity(labels: Mapping[str, str]) -> int | None:
    """``block_size x num_gpu_blocks`` from ``vllm:cache_config_info``'s labels.

    ``None`` when either label is absent or not a decimal integer (vLLM publishes
    ``num_gpu_blocks="None"`` until it has profiled its memory) or the product is 0. Raises
    ``BackendFailed`` for a negative label or a capacity over ``MAX_KV_CAPACITY_TOKENS``.
    """
    try:
        block_size, blocks = int(labels["block_size"]), int(labels["num_gpu_blocks"])
    except (KeyError, ValueError):  # ValueError: also a number of more than 4300 digits
        return None
    if block_size < 0 or blocks < 0:
        raise BackendFailed(f"vllm:cache_config_info has a negative size: {block_size} x {blocks}")
    capacity = block_size * blocks
    if capacity > MAX_KV_CAPACITY_TOKENS:
        raise BackendFailed(
            f"vllm:cache_config_info publishes {block_size} x {blocks} KV tokens, over "
            f"{MAX_KV_CAPACITY_TOKENS:.0e}: not a real cache"
        )
    return capacity or None


def load_from_values(values: Mapping[str, float], engine: Engine, *, now: float = 0.0) -> EngineLoad:
    """Build an ``EngineLoad`` from metric values by name (the simulator hands these over directly).

    Raises ``BackendFailed`` as ``load_from_text`` does.
    """
    names = ENGINE_METRICS[engine]

    def pick(name: str | None) -> float | None:
        if name is None:
            return None
        value = values.get(name)
        if value is None and name in _FALLBACKS:
            value = values.get(_FALLBACKS[name])
        if value is None:
            return None
        if not math.isfinite(value) or value < 0:
            raise BackendFailed(f"metric {name} has an impossible value {value!r}")
        return value

    def requests(name: str | None) -> float | None:
        value = pick(name)
        if value is not None and value > MAX_REQUESTS:
            raise BackendFailed(f"metric {name} reports {value:.3g} requests, over {MAX_REQUESTS:.0e}")
        return value

    running, waiting = requests(names.running), requests(names.waiting)
    kv = pick(names.kv_usage)
    if names.running is not None and running is None and waiting is None:
        raise BackendFailed(f"metrics carry none of {engine}'s load metrics")
    return EngineLoad(
        running=running,
        waiting=waiting,
        kv_usage=None if kv is None else min(kv, 1.0),
        prefix_queries=pick(names.prefix_queries),
        prefix_hits=pick(names.prefix_hits),
        scraped_at=now,
    )
