"""Measure Llama-3.1-8B step times on a real GPU and fit agentgate.sim's latency model to them.

    python benchmarks/calibrate_gpu.py [--quick] [--json] [--out FILE]
    python benchmarks/calibrate_gpu.py --fit FILE [--json]     # refit saved measurements, no GPU

Not part of the suite and not a project dependency: it needs PyTorch with a CUDA GPU (the workplace's
H200 machine has both). The model is the Llama-3.1-8B architecture written out in plain PyTorch
(32 layers, hidden 4096, 32 query / 8 KV heads of 128, MLP 14336, vocabulary 128256, RoPE), BF16,
with seeded random weights: step times do not depend on the weights' values, and nothing is
downloaded. Two kinds of step are timed with CUDA events:

- decode: one token for each of B sequences that each attend to C cached tokens, captured as a
  CUDA graph (as vLLM runs decode), so the time is the GPU's, not Python's kernel launches;
- prefill: U prompt tokens after C cached ones (C = 0: a prompt from scratch; C > 0: a later
  chunk of a chunked prefill, or a prompt whose prefix is cached), causal attention aligned to
  the bottom right, logits for the last token only.

The fit is the simulator's step model (agentgate/sim/_latency.py):
decode = base + decode_seq x B + kv_read x B x C, fitted by least squares on relative error;
prefill = base + prefill_token x U + attention_pair x (U x C + U (U + 1) / 2), with base taken
from the decode fit. The last line is one JSON object with the measurements, the fitted
coefficients and the fit's largest relative error (goal: <= 15% on every point).

What this is not: vLLM. vLLM's fused kernels (paged attention, fused RMSNorm/RoPE, FlashAttention
3 on Hopper) are at least as fast as these PyTorch kernels, so these figures are an upper bound
for the same model on the same GPU; docs/simulation.md says how they are used.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shape:
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 14336
    vocab: int = 128256
    rope_theta: float = 500_000.0

    @property
    def parameters(self) -> int:
        per_layer = (
            self.hidden * (self.hidden + 2 * self.kv_heads * self.head_dim)
            + self.hidden * self.hidden
            + 3 * self.hidden * self.intermediate
            + 2 * self.hidden
        )
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden


LLAMA_8B = Shape()
TINY = Shape(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000)

# (sequences, context tokens each): up to ~0.55M KV tokens (~70 GB of KV at 128 KiB per token). Not
# one sequence with a very long context: PyTorch's attention kernels spread a single sequence over
# too few of the GPU's multiprocessors (engines use split-KV decode kernels for it).
DECODE_GRID = [(1, 256), (1, 2048), (8, 2048), (32, 2048), (64, 256), (64, 2048), (128, 2048),
               (256, 256), (256, 2048), (16, 32768), (64, 8192)]  # fmt: skip
# (prompt tokens computed, tokens already cached before them): the steps an engine runs with
# chunked prefill (at most 8192 prompt tokens per step, vLLM's default budget), from a prompt's
# first chunk (nothing cached) to a late chunk of a 100k-token prompt.
PREFILL_GRID = [(u, c) for u in (1024, 2048, 4096, 8192) for c in (0, 8192, 32768, 90112)]
QUICK_DECODE = [(1, 256), (1, 2048), (64, 2048), (256, 256)]
QUICK_PREFILL = [(1024, 0), (2048, 0), (8192, 0), (2048, 8192)]
TINY_DECODE = [(1, 16), (4, 64), (8, 16)]
TINY_PREFILL = [(16, 0), (64, 0), (32, 64)]


class Model:
    """The Llama architecture's forward pass with random BF16 weights, for timing only."""

    def __init__(self, torch: Any, shape: Shape, device: str, seed: int = 0) -> None:
        self.t, self.s, self.device = torch, shape, device
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        gen = torch.Generator(device=device).manual_seed(seed)
        kv = shape.kv_heads * shape.head_dim

        def weight(*size: int) -> Any:
            return torch.randn(*size, device=device, dtype=self.dtype, generator=gen) * 0.02

        self.embed = weight(shape.vocab, shape.hidden)
        self.layers = [
            {
                "qkv": weight(shape.hidden + 2 * kv, shape.hidden),  # (out, in), as nn.Linear keeps them
                "o": weight(shape.hidden, shape.hidden),
                "gate_up": weight(2 * shape.intermediate, shape.hidden),
                "down": weight(shape.hidden, shape.intermediate),
                "norm1": torch.ones(shape.hidden, device=device, dtype=self.dtype),
                "norm2": torch.ones(shape.hidden, device=device, dtype=self.dtype),
            }
            for _ in range(shape.layers)
        ]
        self.norm = torch.ones(shape.hidden, device=device, dtype=self.dtype)
        self.lm_head = weight(shape.vocab, shape.hidden)
        half = shape.head_dim // 2
        self.inv_freq = 1.0 / (
            shape.rope_theta ** (torch.arange(half, device=device, dtype=torch.float32) / half)
        )

    def _rms(self, x: Any, weight: Any) -> Any:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x * self.t.rsqrt(variance + 1e-5).to(x.dtype)) * weight

    def _rope(self, x: Any, positions: Any) -> Any:
        # x: (tokens, heads, head_dim); positions: (tokens,)
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos().to(x.dtype)[:, None, :], freqs.sin().to(x.dtype)[:, None, :]
        x1, x2 = x.chunk(2, dim=-1)
        return self.t.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def _mlp(self, x: Any, layer: dict[str, Any]) -> Any:
        linear = self.t.nn.functional.linear
        gate, up = linear(self._rms(x, layer["norm2"]), layer["gate_up"]).chunk(2, dim=-1)
        return x + linear(self.t.nn.functional.silu(gate) * up, layer["down"])

    def _qkv(self, x: Any, layer: dict[str, Any], positions: Any) -> tuple[Any, Any, Any]:
        s = self.s
        qkv = self.t.nn.functional.linear(self._rms(x, layer["norm1"]), layer["qkv"])
        q, k, v = qkv.split((s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim), dim=-1)
        q = self._rope(q.view(-1, s.heads, s.head_dim), positions)
        k = self._rope(k.view(-1, s.kv_heads, s.head_dim), positions)
        return q, k, v.view(-1, s.kv_heads, s.head_dim)

    def _attend_after(self, q: Any, k: Any, v: Any, past_k: Any, past_v: Any) -> Any:
        """Causal attention of a chunk (q, k, v) that follows cached (past_k, past_v): bottom-right.

        On a GPU as FlashAttention-based engines do it: the chunk attends to the cache (no mask)
        and to itself (causal) in two FlashAttention calls, merged by their log-sum-exp.
        Elsewhere: one call with a bottom-right causal mask (slower, same result).
        """
        t = self.t
        if self.device != "cuda":
            from torch.nn.attention.bias import causal_lower_right

            k, v = t.cat((past_k, k), dim=2), t.cat((past_v, v), dim=2)
            mask = causal_lower_right(q.shape[2], k.shape[2])
            return t.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        flash = t.ops.aten._scaled_dot_product_flash_attention
        out_past, lse_past = flash(q, past_k, past_v, 0.0, False)[:2]
        out_own, lse_own = flash(q, k, v, 0.0, True)[:2]
        lse = t.logaddexp(lse_past, lse_own)
        merged = out_past * (lse_past - lse).exp().unsqueeze(-1) + out_own * (lse_own - lse).exp().unsqueeze(
            -1
        )
        return merged.to(q.dtype)

    def prefill(self, tokens: Any, past: tuple[Any, Any] | None) -> Any:
        """Logits of the last of ``tokens`` computed after ``past`` = (K, V), each (1, heads, cached, dim).

        The cached keys and values are given already repeated for every query head (the layout the
        attention kernel reads), and the same for every layer: their values do not change the time.
        """
        t, s = self.t, self.s
        functional = t.nn.functional
        cached = 0 if past is None else past[0].shape[2]
        positions = t.arange(cached, cached + tokens.shape[0], device=self.device)
        x = self.embed[tokens]
        groups = s.heads // s.kv_heads
        for layer in self.layers:
            q, k, v = self._qkv(x, layer, positions)
            # KV heads repeated for their query heads: a copy of ~1% of the step, kernels everywhere
            q, k, v = (a.transpose(0, 1).unsqueeze(0) for a in (q, k, v))
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            if past is None:
                out = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                out = self._attend_after(q, k, v, *past)
            x = x + functional.linear(out.squeeze(0).transpose(0, 1).reshape(-1, s.hidden), layer["o"])
            x = self._mlp(x, layer)
        return functional.linear(self._rms(x[-1:], self.norm), self.lm_head)

    def decode_step(self, tokens: Any, position: int, caches: list[tuple[Any, Any]]) -> Any:
        """Next tokens for ``tokens`` (B,), each sequence with ``position`` cached tokens in ``caches``.

        Each layer's cache is (K, V), each (B, kv_heads, position + 1, dim); the new token's K and V
        are written at ``position``. Grouped-query attention without copying the cache: the query
        heads that share a KV head are that head's query positions, which attend to every cached
        token (a decoding token sees its whole context).
        """
        t, s = self.t, self.s
        batch = tokens.shape[0]
        positions = t.full((batch,), position, device=self.device, dtype=t.long)
        x = self.embed[tokens]
        groups = s.heads // s.kv_heads
        for layer, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
            q, k, v = self._qkv(x, layer, positions)
            k_cache[:, :, position] = k
            v_cache[:, :, position] = v
            q = q.view(batch, s.kv_heads, groups, s.head_dim)
            out = t.nn.functional.scaled_dot_product_attention(q, k_cache, v_cache)
            x = x + t.nn.functional.linear(out.reshape(batch, s.hidden), layer["o"])
            x = self._mlp(x, layer)
        return t.nn.functional.linear(self._rms(x, self.norm), self.lm_head).argmax(-1)


class Timer:
    """Seconds per call of a GPU operation: CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, torch: Any, device: str) -> None:
        self.t, self.cuda = torch, device == "cuda"

    def median(self, fn: Any, repeats: int, warmup: int = 1) -> float:
        for _ in range(warmup):
            fn()
        samples: list[float] = []
        for _ in range(repeats):
            if self.cuda:
                start, end = self.t.cuda.Event(enable_timing=True), self.t.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                began = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - began)
        return statistics.median(samples)


def measure_decode(torch: Any, model: Model, timer: Timer, batch: int, context: int) -> float:
    s, device = model.s, model.device
    caches = [
        tuple(
            torch.zeros(batch, s.kv_heads, context + 1, s.head_dim, device=device, dtype=model.dtype)
            for _ in range(2)
        )
        for _ in range(s.layers)
    ]
    tokens = torch.randint(0, s.vocab, (batch,), device=device)
    with torch.inference_mode():
        if device != "cuda":
            return timer.median(lambda: model.decode_step(tokens, context, caches), repeats=5)
        seconds = _graph_replay_time(torch, timer, lambda: model.decode_step(tokens, context, caches))
    caches.clear()
    torch.cuda.empty_cache()
    return seconds


def _graph_replay_time(torch: Any, timer: Timer, step: Any) -> float:
    """Seconds per replay of ``step`` captured as a CUDA graph (warmed up on a side stream first)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def replay_ten() -> None:
        for _ in range(10):
            graph.replay()

    return timer.median(replay_ten, repeats=7, warmup=2) / 10


def measure_prefill(torch: Any, model: Model, timer: Timer, uncached: int, cached: int) -> float:
    s, device = model.s, model.device
    tokens = torch.randint(0, s.vocab, (uncached,), device=device)
    past = None
    if cached:
        past = tuple(
            torch.randn(1, s.heads, cached, s.head_dim, device=device, dtype=model.dtype) for _ in range(2)
        )
    repeats = 2 if uncached + cached >= 32768 else 5
    with torch.inference_mode(), _fused_attention_only(torch, device):
        seconds = timer.median(lambda: model.prefill(tokens, past), repeats=repeats, warmup=2)
    if device == "cuda":
        torch.cuda.empty_cache()
    return seconds


def _fused_attention_only(torch: Any, device: str) -> Any:
    """On a GPU, fail rather than fall back to attention that builds the whole score matrix."""
    from contextlib import nullcontext

    if device != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    )


def pairs(uncached: int, cached: int) -> int:
    """(prompt token, earlier token) attention pairs of a prefill, as agentgate.sim counts them."""
    return uncached * cached + uncached * (uncached + 1) // 2


def least_squares(rows: list[list[float]], targets: list[float], scales: list[float]) -> list[float]:
    """The x minimising the sum of ((row . x - target) / scale)^2: relative error when scale is the measurement."""
    n = len(rows[0])
    weighted = [([x / w for x in r], y / w) for r, y, w in zip(rows, targets, scales, strict=True)]
    a = [[sum(r[i] * r[j] for r, _ in weighted) for j in range(n)] for i in range(n)]
    b = [sum(r[i] * y for r, y in weighted) for i in range(n)]
    for col in range(n):  # Gaussian elimination with partial pivoting: n is 2 or 3
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for row in range(col + 1, n):
            factor = a[row][col] / a[col][col]
            a[row] = [x - factor * y for x, y in zip(a[row], a[col], strict=True)]
            b[row] -= factor * b[col]
    solution = [0.0] * n
    for row in reversed(range(n)):
        solution[row] = (b[row] - sum(a[row][j] * solution[j] for j in range(row + 1, n))) / a[row][row]
    return solution


def fit(measurements: dict[str, Any]) -> dict[str, Any]:
    """The simulator's coefficients fitted to ``measurements`` and each point's relative error."""
    decode = measurements["decode"]
    base, per_seq, kv_read = least_squares(
        [[1.0, d["batch"], d["batch"] * d["context"]] for d in decode],
        [d["seconds"] for d in decode],
        [d["seconds"] for d in decode],
    )
    prefill = measurements["prefill"]
    per_token, per_pair = least_squares(
        [[p["uncached"], pairs(p["uncached"], p["cached"])] for p in prefill],
        [p["seconds"] - base for p in prefill],
        [p["seconds"] for p in prefill],
    )
    coefficients = {
        "base_s": base,
        "decode_seq_s": per_seq,
        "kv_read_s": kv_read,
        "prefill_token_s": per_token,
        "attention_pair_s": per_pair,
    }
    errors = [
        {**d, "model_s": base + per_seq * d["batch"] + kv_read * d["batch"] * d["context"]} for d in decode
    ] + [
        {**p, "model_s": base + per_token * p["uncached"] + per_pair * pairs(p["uncached"], p["cached"])}
        for p in prefill
    ]
    for point in errors:
        point["error"] = point["model_s"] / point["seconds"] - 1.0
    return {
        "coefficients": coefficients,
        "points": errors,
        "max_abs_error": max(abs(p["error"]) for p in errors),
    }


def measure(quick: bool, tiny: bool) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        sys.exit(
            "calibrate_gpu: PyTorch is not installed (it is not a project dependency); see the docstring"
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not tiny:
        sys.exit("calibrate_gpu: no CUDA GPU here; --tiny runs a small model on the CPU to check the script")
    shape = TINY if tiny else LLAMA_8B
    decode_grid = TINY_DECODE if tiny else QUICK_DECODE if quick else DECODE_GRID
    prefill_grid = TINY_PREFILL if tiny else QUICK_PREFILL if quick else PREFILL_GRID
    began = time.perf_counter()
    model = Model(torch, shape, device)
    timer = Timer(torch, device)
    info: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": shape.parameters,
        "memory_bytes": torch.cuda.mem_get_info()[1] if device == "cuda" else None,
        "shape": "llama-3.1-8b" if not tiny else "tiny",
    }
    decode = []
    failed = []
    for batch, context in decode_grid:
        try:
            seconds = measure_decode(torch, model, timer, batch, context)
        except RuntimeError as exc:  # out of memory or no kernel: say so, keep the other points
            failed.append(f"decode B={batch} C={context}: {str(exc).splitlines()[0]}")
            print("failed:", failed[-1], flush=True)
            continue
        decode.append({"batch": batch, "context": context, "seconds": seconds})
        print(f"decode  B={batch:>4} C={context:>6}  {seconds * 1e3:9.3f} ms", flush=True)
    prefill = []
    for uncached, cached in prefill_grid:
        try:
            seconds = measure_prefill(torch, model, timer, uncached, cached)
        except RuntimeError as exc:
            failed.append(f"prefill U={uncached} C={cached}: {str(exc).splitlines()[0]}")
            print("failed:", failed[-1], flush=True)
            continue
        prefill.append({"uncached": uncached, "cached": cached, "seconds": seconds})
        print(f"prefill U={uncached:>6} C={cached:>6}  {seconds * 1e3:9.3f} ms", flush=True)
    info["wall_s"] = round(time.perf_counter() - began, 1)
    info["failed"] = failed
    return {"info": info, "decode": decode, "prefill": prefill}


def report(measurements: dict[str, Any], as_json: bool) -> None:
    result = fit(measurements)
    c = result["coefficients"]
    print(
        f"\nmeasured on {measurements['info']['device']} ({measurements['info']['shape']}), torch {measurements['info']['torch']}"
    )
    print(f"{'step':<30} {'measured ms':>12} {'model ms':>10} {'error':>7}")
    for p in result["points"]:
        label = (
            f"decode B={p['batch']} C={p['context']}"
            if "batch" in p
            else f"prefill U={p['uncached']} C={p['cached']}"
        )
        print(f"{label:<30} {p['seconds'] * 1e3:12.3f} {p['model_s'] * 1e3:10.3f} {p['error']:+7.1%}")
    print(
        f"fit: base {c['base_s'] * 1e3:.3f} ms, decode_seq {c['decode_seq_s'] * 1e6:.2f} us, "
        f"kv_read {c['kv_read_s'] * 1e9:.2f} ns/token, prefill {c['prefill_token_s'] * 1e6:.2f} us/token, "
        f"attention {c['attention_pair_s'] * 1e12:.1f} ps/pair; largest error {result['max_abs_error']:.1%}"
    )
    if as_json:
        figures = {name: float(f"{value:.6g}") for name, value in c.items()}
        figures["points"] = len(result["points"])
        line = {
            "benchmark": "calibrate_gpu",
            "figures": figures,
            "goals": {
                "fit_max_abs_error": {
                    "value": round(result["max_abs_error"], 4),
                    "limit": 0.15,
                    "better": "lower",
                }
            },
        }
        print(json.dumps(line))


POINT_FIELDS = {"decode": ("batch", "context"), "prefill": ("uncached", "cached")}
MAX_COUNT = 2**30
"""The most sequences or tokens a point's field holds: far past any GPU's batch or context, and
small enough that the fit's products of them stay floats (until review R85 a whole number too
large for a float, ``10**400``, passed the check and the fit ended in an OverflowError)."""


def positive_seconds(value: object) -> bool:
    """Whether ``value`` is a positive finite number of seconds (a bool is none). An integer too
    large for a float is not finite: ``math.isfinite`` raises ``OverflowError`` on it, which until
    review R87 ended ``--fit`` of a point of ``10**400`` seconds in a traceback."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:
        return False


def read_measurements(path: Path) -> dict[str, Any]:
    """Measurements saved by ``--out``, checked before they are fitted.

    Exits with a message naming the file (no traceback, no JSON line) when it cannot be read, is not
    JSON, or lacks what the fit and the report read: ``info`` (``device``, ``shape``, ``torch``),
    and ``decode`` and ``prefill`` points with whole numbers of tokens (0 to ``MAX_COUNT``) and a
    positive finite time each (``positive_seconds``).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        sys.exit(f"calibrate_gpu: --fit {path}: cannot read it: {exc}")
    except RecursionError:
        # Until review R90 a traceback: ``json`` recurses once per level of arrays or objects.
        sys.exit(f"calibrate_gpu: --fit {path}: cannot read it: JSON nested too deeply")
    if not isinstance(data, dict):
        sys.exit(f"calibrate_gpu: --fit {path}: not a JSON object of measurements")
    info = data.get("info")
    if not isinstance(info, dict) or not all(key in info for key in ("device", "shape", "torch")):
        sys.exit(f"calibrate_gpu: --fit {path}: 'info' must name the device, shape and torch")
    for kind, fields in POINT_FIELDS.items():
        points = data.get(kind)
        if not isinstance(points, list) or not points:
            sys.exit(f"calibrate_gpu: --fit {path}: '{kind}' must be a list of points")
        for number, point in enumerate(points):
            if not (
                isinstance(point, dict)
                and all(type(point.get(field)) is int and 0 <= point[field] <= MAX_COUNT for field in fields)
                and positive_seconds(point.get("seconds"))
            ):
                sys.exit(
                    f"calibrate_gpu: --fit {path}: {kind} point {number} needs whole numbers "
                    f"{' and '.join(fields)} from 0 to 2**30 and a positive number of seconds"
                )
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few points only")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (runs on a CPU): checks the script")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--out", type=Path, help="write the measurements to this JSON file")
    parser.add_argument("--fit", type=Path, help="fit saved measurements instead of measuring")
    args = parser.parse_args()
    if args.fit:
        measurements = read_measurements(args.fit)
    else:
        measurements = measure(args.quick, args.tiny)
        if args.out:
            args.out.write_text(json.dumps(measurements, indent=1) + "\n")
    if not all(positive_seconds(p["seconds"]) for p in measurements["decode"] + measurements["prefill"]):
        sys.exit("calibrate_gpu: a measurement is not a positive number")
    try:  # the report fits again (a few points): this only refuses what it could not fit
        largest_error = fit(measurements)["max_abs_error"]
    except ZeroDivisionError:
        sys.exit("calibrate_gpu: the points do not determine the fit (too few distinct sizes)")
    if not math.isfinite(largest_error):
        sys.exit("calibrate_gpu: the fit's error is not a finite number")
    report(measurements, args.json)


if __name__ == "__main__":
    main()
