"""The iteration latency model of a vLLM-like engine: profiles from published figures, measurements, or (one) illustrative.

One engine iteration (a "step") runs the whole batch through the model once. Its time is::

    step = base                                   # read the weights once (bandwidth bound)
         + decode_seq_s    * decoding sequences   # per-sequence sampling and scheduling overhead
         + kv_read_s       * context tokens read by the decoding sequences (attention, bandwidth)
         + prefill_token_s * prefill tokens       # linear layers (compute bound)
         + attention_pair_s * (prefill token, context token) pairs   # prefill attention

The sources and the fit are in docs/simulation.md; the profiles below carry the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import NoReturn

from agentgate._shown import quoted
from agentgate.errors import InputError

MAX_KV_CAPACITY_TOKENS = 10**12
"""The largest KV capacity (and KV block) a profile or an engine takes, in tokens: a trillion,
thousands of times any real engine's, and the most agentgate's router believes of a published one
(``agentgate.dispatch.inventory.MAX_KV_CAPACITY_TOKENS``), which the simulator's ``/metrics``
publishes. Until review R90 any integer was taken, and one of more than 4,300 digits (which has no
``str``) made every ``/metrics`` request a 500."""


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Per-step cost coefficients of one model on one GPU type (seconds)."""

    name: str
    """Profile name, e.g. ``llama-3.1-8b@h100``."""
    base_s: float
    """Weight-read time of one step: the decode time per token at batch size 1."""
    decode_seq_s: float
    """Added per decoding sequence in the batch."""
    kv_read_s: float
    """Added per context token that a decoding sequence attends to (KV bytes / HBM bandwidth)."""
    prefill_token_s: float
    """Added per prompt token computed in the step (2 x parameters FLOPs / effective FLOP/s)."""
    attention_pair_s: float
    """Added per (prefill token, earlier context token) pair: prefill attention, quadratic."""
    kv_capacity_tokens: int
    """KV cache capacity of one replica in tokens (HBM left after weights / KV bytes per token)."""

    def __post_init__(self) -> None:
        """Refuse (``InputError``, naming the profile and the field) a coefficient that is not a
        finite number of 0 or more, or a ``kv_capacity_tokens`` that is not an integer from 1 to
        ``MAX_KV_CAPACITY_TOKENS``. Until review R66 any was taken: with a NaN or infinite one a
        replay never returned, with a negative one requests had their first token before they
        arrived."""
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "name":
                continue
            if field.name == "kv_capacity_tokens":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or not 1 <= value <= MAX_KV_CAPACITY_TOKENS
                ):
                    raise InputError(
                        f"latency profile {self.name!r:.60}: kv_capacity_tokens must be an integer from "
                        f"1 to 10**12 (MAX_KV_CAPACITY_TOKENS), not {quoted(value, 40)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise InputError(
                    f"latency profile {self.name!r:.60}: {field.name} must be a finite number of seconds, "
                    f"0 or more, not {value!r:.40}"
                )

    def step_time(self, n_decode: int, decode_context: int, prefill_tokens: int, prefill_pairs: int) -> float:
        """Seconds one step takes for this batch; never less than ``base_s``. Raises
        ``InputError`` for a count below 0 (until review R88 it was taken, and gave a step
        shorter than ``base_s``, or one of negative time)."""
        if n_decode < 0 or decode_context < 0 or prefill_tokens < 0 or prefill_pairs < 0:
            self._refuse_negative(
                "step_time",
                n_decode=n_decode,
                decode_context=decode_context,
                prefill_tokens=prefill_tokens,
                prefill_pairs=prefill_pairs,
            )
        return (
            self.base_s
            + self.decode_seq_s * n_decode
            + self.kv_read_s * decode_context
            + self.prefill_token_s * prefill_tokens
            + self.attention_pair_s * prefill_pairs
        )

    def prefill_time(self, uncached: int, cached: int = 0) -> float:
        """Seconds to prefill ``uncached`` tokens after ``cached`` ones, alone on an idle engine;
        never less than ``base_s``. Raises ``InputError`` for a count below 0 (as ``step_time``)."""
        if uncached < 0 or cached < 0:
            self._refuse_negative("prefill_time", uncached=uncached, cached=cached)
        pairs = uncached * cached + uncached * (uncached + 1) // 2
        return self.step_time(0, 0, uncached, pairs)

    def _refuse_negative(self, method: str, **counts: int) -> NoReturn:
        """Raise ``InputError`` naming the profile, ``method`` and the first of ``counts`` below 0."""
        name, value = next((name, value) for name, value in counts.items() if value < 0)
        raise InputError(
            f"latency profile {quoted(self.name, 60)}: {method}'s {name} must be 0 or more, not {quoted(value, 40)}"
        )


# Llama-3.1-8B, BF16, one H100 SXM (3.35 TB/s HBM, ~989 dense BF16 TFLOP/s).
# base: NVIDIA NIM decode 4.6 ms/token at concurrency 1 (weight-bandwidth bound: 16 GB / 3.35 TB/s
# = 4.8 ms). decode_seq + kv_read: 7.6 ms/token at concurrency 100, with ~300 context tokens per
# sequence: 4.6 + 100 x 0.018 + 100 x 300 x 0.039e-3 = 7.6 ms. kv_read: 128 KiB of KV per token
# (32 layers x 8 KV heads x 128 x 2 x 2 bytes) / 3.35 TB/s. prefill_token: NIM TTFT ~10 ms for a
# ~180-token prompt at concurrency 1: (10 - 4.6) / 180 = 30 us (16 GFLOP/token at ~53% of peak).
# attention_pair: 4 x 32 layers x 4096 FLOPs / 500 TFLOP/s. kv capacity: (80 - 16) GB x 0.9 / 128 KiB.
LLAMA_8B_H100 = LatencyModel(
    name="llama-3.1-8b@h100",
    base_s=4.6e-3,
    decode_seq_s=0.018e-3,
    kv_read_s=0.039e-6,
    prefill_token_s=30e-6,
    attention_pair_s=1.05e-9,
    kv_capacity_tokens=440_000,
)

# Same model on one H200 (4.8 TB/s, 141 GB), measured: benchmarks/calibrate_gpu.py timed 27 steps of
# the Llama-3.1-8B architecture in BF16 on an H200 (data: benchmarks/calibration/llama-3.1-8b-h200.json)
# and its least-squares fit gives decode_seq 18.4 us, kv_read 28.0 ns per context token, prefill
# 25.5 us per token (cuBLAS at ~630 TFLOP/s) and 1.61 ns per attention pair (PyTorch's FlashAttention-2;
# vLLM's FlashAttention-3 is faster, so long prompts here are conservative), every point within 6.2%.
# base is the weight-bandwidth bound, 16.06 GB / 4.8 TB/s = 3.3 ms: the plain PyTorch step measured
# 7.6 ms at batch 1 because its ~25 unfused kernels per layer cost ~4 ms that engines' fused kernels
# do not. KV capacity: (150.1 GB, the memory the GPU reports, - 16.06 GB of weights) x 0.9 / 128 KiB.
LLAMA_8B_H200 = LatencyModel(
    name="llama-3.1-8b@h200",
    base_s=3.3e-3,
    decode_seq_s=18.4e-6,
    kv_read_s=28.0e-9,
    prefill_token_s=25.5e-6,
    attention_pair_s=1.61e-9,
    kv_capacity_tokens=920_000,
)

# KV: 64 layers x 8 KV heads x 128 x 2 x 2 bytes = 256 KiB per token.
QWEN3_32B = LatencyModel(
    name="qwen3-32b",
    base_s=12e-3,
    decode_seq_s=0.03e-3,
    kv_read_s=0.08e-6,
    prefill_token_s=0.41e-3,
    attention_pair_s=4e-9,
    kv_capacity_tokens=200_000,
)
"""Illustrative, not calibrated: a larger model whose 10,000-token prompt takes 4.31 s to first
token uncached and well under a second with most of it cached (12 ms + 10,000 x 0.41 ms +
4e-9 x 10,000^2 / 2), for tests and examples of long prompts and prefix caching. No source is
known for those two figures, and no single GPU and precision gives all of its coefficients by
docs/simulation.md's rules: in BF16 (65.6 GB of weights) the weight read alone is 19.6 ms on an
H100 and 13.7 ms on an H200, above ``base_s``; ``kv_read_s`` is an H100's bandwidth, whose 80 GB
hold about 50k tokens of KV, not 200k; ``prefill_token_s`` is 16% of an H100's BF16 peak (the
8B profiles take about 54% on an H100 and 64% on an H200). Use the Llama-3.1-8B profiles for figures that claim to be real
(review R96: until then it was documented as coming from published figures, with none named)."""

PROFILES: dict[str, LatencyModel] = {m.name: m for m in (LLAMA_8B_H100, LLAMA_8B_H200, QWEN3_32B)}
"""Every built-in profile by name."""
