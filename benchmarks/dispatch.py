"""Trace replay: the agentgate router against the known routers, on simulated vLLM backends.

Every router sees the same pool (``--backends`` simulated Llama-3.1-8B replicas on H200, the
calibrated model in docs/simulation.md), the same requests and the same information (its own
dispatch accounting plus engine metrics scraped every ``--scrape`` seconds). Arrival times are
scaled so that the offered load is a chosen fraction of the pool's estimated capacity (see
``capacity_rps``). Each request gets a tenant, a priority class and a TTFT SLO from a seeded
draw (``annotate``); goodput counts requests whose first token came within their SLO, shed
requests counted as misses.

    python benchmarks/dispatch.py --trace ../shared/data/traces/mooncake_conversation_trace.jsonl \
        --load 0.5,0.8,1.0,1.1 --seeds 1 --json

Prints a table per trace, writes a PNG of p99 TTFT against load (``--plot``), and prints one
JSON object as its last line.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agentgate.dispatch import inventory_from_mapping  # noqa: E402
from agentgate.dispatch._policy import RoutingPolicy  # noqa: E402
from agentgate.dispatch.baselines import BASELINES  # noqa: E402
from agentgate.dispatch.inventory import Inventory  # noqa: E402
from agentgate.dispatch.quota import TenantQuota  # noqa: E402
from agentgate.dispatch.router import Router  # noqa: E402
from agentgate.dispatch.state import SpeedModel  # noqa: E402
from agentgate.errors import InputError  # noqa: E402
from agentgate.sim import LLAMA_8B_H200, Engine, EngineConfig, LatencyModel, Outcome, load_trace, replay  # noqa: E402
from agentgate.sim._des import MIN_SCRAPE_INTERVAL_S  # noqa: E402
from agentgate.sim.routing import PolicyDispatcher  # noqa: E402
from agentgate.sim.traces import TraceRequest  # noqa: E402
from benchmarks._args import MIN_LOAD, offered_load, positive, positive_int, whole_up_to  # noqa: E402

TRACES = REPO.parent / "shared" / "data" / "traces"
DEFAULT_TRACES = [TRACES / "mooncake_conversation_trace.jsonl", TRACES / "AzureLLMInferenceTrace_conv.csv"]
MODEL = LLAMA_8B_H200
BLOCK = 512
TENANTS = (("t0", 0.4), ("t1", 0.3), ("t2", 0.2), ("t3", 0.1))
CLASSES = ((0, 0.2, 0.25, 3.0), (1, 0.6, 0.5, 5.0), (2, 0.2, 1.0, 10.0))
"""(class, share, SLO floor s, SLO multiple of the prompt's prefill time alone)."""
LOAD_BASED = ("round-robin", "litellm-least-busy", "litellm-latency", "load-balanced")
CACHE_AWARE = "mooncake"
LOAD_BALANCED = "load-balanced"


def capacity_rps(
    requests: Sequence[TraceRequest], model: LatencyModel, backends: int, max_seqs: int = 256
) -> float:
    """Requests per second the pool sustains on this mix with no prefix reuse: each request costs
    its prefill alone plus its output tokens at the batch size KV memory allows."""
    mean_in = statistics.fmean(r.prompt_tokens for r in requests)
    mean_out = statistics.fmean(r.output_tokens for r in requests)
    ctx = mean_in + mean_out / 2
    batch = max(1.0, min(max_seqs, model.kv_capacity_tokens / ctx))
    per_token = model.base_s / batch + model.decode_seq_s + model.kv_read_s * ctx
    work = statistics.fmean(model.prefill_time(r.prompt_tokens) for r in requests) + mean_out * per_token
    return backends / work


def annotate(requests: Sequence[TraceRequest], seed: int, model: LatencyModel) -> list[TraceRequest]:
    """Give each request a tenant (per session where the trace has sessions), a class and an SLO."""
    rng = random.Random(seed)
    tenant_of: dict[str, str] = {}
    out = []
    for r in requests:
        key = r.session or r.id
        if key not in tenant_of:
            tenant_of[key] = rng.choices([t for t, _ in TENANTS], [w for _, w in TENANTS])[0]
        cls, _, floor, mult = rng.choices(CLASSES, [c[1] for c in CLASSES])[0]
        slo = floor + mult * model.prefill_time(r.prompt_tokens)
        out.append(dataclasses.replace(r, tenant=tenant_of[key], priority=cls, slo_ttft_s=slo))
    return out


def scale(requests: Sequence[TraceRequest], rate: float) -> list[TraceRequest]:
    """Stretch or squeeze arrival times so the mean rate is ``rate`` requests per second."""
    span = requests[-1].arrival - requests[0].arrival
    factor = span / (len(requests) / rate) if span > 0 else 1.0
    return [dataclasses.replace(r, arrival=r.arrival / factor) for r in requests]


def pool(n: int) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {
                    "name": f"gpu{i}",
                    "url": f"http://sim{i}",
                    "engine": "vllm",
                    "models": ["m"],
                    "kv_capacity_tokens": MODEL.kv_capacity_tokens,
                    "max_concurrency": 256,
                }
                for i in range(n)
            ]
        }
    )


def routers(
    inv: Inventory, seed: int, quotas: dict[str, TenantQuota]
) -> dict[str, Callable[[], RoutingPolicy]]:
    speed = SpeedModel(
        base_s=MODEL.base_s,
        decode_seq_s=MODEL.decode_seq_s,
        kv_read_s=MODEL.kv_read_s,
        prefill_token_s=MODEL.prefill_token_s,
        attention_pair_s=MODEL.attention_pair_s,
    )
    common: dict[str, Any] = {"speed": speed, "block_tokens": BLOCK, "seed": seed}
    made: dict[str, Callable[[], RoutingPolicy]] = {"agentgate": lambda: Router(inv, quotas=quotas, **common)}
    for name, cls in BASELINES.items():
        made[name] = functools.partial(cls, inv, **common)
    return made


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs and any(xs) else 0.0


def figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """The figures of one replay's outcomes, in one pass per figure: linear in the number of
    requests (until review R96 each tenant's SLO hits were counted with ``o in met``, a scan of a
    list of dataclasses per request, so 3,000 requests took longer here than in the replay)."""
    served = [o for o in outcomes if o.ttft is not None]
    ttft = [o.ttft for o in served if o.ttft is not None]
    met = [o for o in served if o.ttft is not None and o.ttft <= o.request.slo_ttft_s]
    by_class: dict[str, float] = {}
    for cls, *_ in CLASSES:
        members = [o for o in outcomes if o.request.priority == cls]
        ok = sum(1 for o in members if o.ttft is not None and o.ttft <= o.request.slo_ttft_s)
        by_class[str(cls)] = ok / len(members) if members else math.nan
    requests_of = Counter(o.request.tenant for o in outcomes)
    met_of = Counter(o.request.tenant for o in met)
    per_tenant = [met_of[t] / requests_of[t] for t, _ in TENANTS if requests_of[t]]
    prompt = sum(o.request.prompt_tokens for o in served)
    # Queueing delay: TTFT minus the time the uncached prompt takes on an idle backend. The p99
    # TTFT of a trace with 100k-token prompts is bounded below by their prefill alone; this is
    # the part of TTFT a router can change.
    excess = [
        o.ttft - MODEL.prefill_time(o.request.prompt_tokens - o.cached_tokens, o.cached_tokens)
        for o in served
        if o.ttft is not None
    ]
    return {
        "ttft_mean": statistics.fmean(ttft) if ttft else math.nan,
        "ttft_p50": pct(ttft, 0.5),
        "ttft_p90": pct(ttft, 0.9),
        "ttft_p99": pct(ttft, 0.99),
        "queue_delay_p99": pct(excess, 0.99),
        # NaN, as the other figures of nothing, when no request served has a second token (a
        # trace of one-token answers: until review R66, a StatisticsError traceback).
        "tpot_mean": statistics.fmean(tpots)
        if (tpots := [tpot for o in served if (tpot := o.tpot) is not None])
        else math.nan,
        "e2e_p50": pct([e for o in served if (e := o.e2e) is not None], 0.5),
        "e2e_p99": pct([e for o in served if (e := o.e2e) is not None], 0.99),
        "prefix_hit_rate": sum(o.cached_tokens for o in served) / prompt if prompt else 0.0,
        "goodput": len(met) / len(outcomes),
        "shed": sum(1 for o in outcomes if o.rejected) / len(outcomes),
        "slo_by_class": by_class,
        "jain_tenants": jain(per_tenant),
        "preemptions": sum(o.preemptions for o in outcomes),
    }


def ttft_floor_p99(requests: Sequence[TraceRequest], model: LatencyModel) -> float:
    """A lower bound on any router's p99 TTFT for ``requests``: the p99 of each request's prefill
    alone on an idle backend with every prefix the trace showed before it already cached there.

    A request's TTFT is never below that time (queueing, batching and cache misses only add to
    it), and if every value of one list is at least the matching value of another, so is each of
    its percentiles (for a router that serves every request: the figures take p99 over served
    requests, which shedding the longest prompts would lower). Only full blocks count as cached,
    and the last prompt token is always computed; the simulator reuses at most
    ``(prompt - 1) // block`` blocks, never more than this counts, so the bound holds. A prompt of
    0 tokens (which ``load_trace`` takes) counts nothing cached and a prefill of 0 tokens.
    """
    seen: set[int] = set()
    alone = []
    for r in sorted(requests, key=lambda r: r.arrival):
        full = r.prompt_tokens // r.block_tokens
        cached_blocks = 0
        for h in r.hashes[:full]:
            if h not in seen:
                break
            cached_blocks += 1
        cached = max(0, min(cached_blocks * r.block_tokens, r.prompt_tokens - 1))
        alone.append(model.prefill_time(r.prompt_tokens - cached, cached))
        seen.update(r.hashes[:full])
    return pct(alone, 0.99)


def run_trace(
    path: Path, base: list[TraceRequest], loads: list[float], seeds: int, backends: int, scrape: float
) -> dict[str, Any]:
    """Replay ``base`` (the requests read from ``path``) at each load and seed through every router."""
    cap = capacity_rps(base, MODEL, backends)
    mean_tokens = statistics.fmean(r.prompt_tokens + r.output_tokens for r in base)
    quotas = {
        t: TenantQuota(cap * mean_tokens / len(TENANTS), 20 * cap * mean_tokens / len(TENANTS))
        for t, _ in TENANTS
    }
    inv = pool(backends)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for load in loads:
        for seed in range(seeds):
            reqs = scale(annotate(base, seed, MODEL), load * cap)
            for name, make in routers(inv, seed, quotas).items():
                engines = {b.name: Engine(MODEL, EngineConfig(block_tokens=BLOCK)) for b in inv.backends}
                t0 = time.perf_counter()
                out = replay(reqs, engines, PolicyDispatcher(make(), "m"), scrape_interval=scrape)
                replayed_s = time.perf_counter() - t0
                fig = figures(out)
                # The replay alone: until review R96 this also counted figures(), then most of it.
                fig["wall_s"] = replayed_s
                results.setdefault(name, {}).setdefault(str(load), []).append(fig)
    merged = {
        name: {load: _mean_figs(runs) for load, runs in per_load.items()}
        for name, per_load in results.items()
    }
    return {
        "trace": path.name,
        "requests": len(base),
        "capacity_rps": cap,
        "backends": backends,
        "ttft_p99_floor": ttft_floor_p99(base, MODEL),
        "routers": merged,
    }


def _mean_figs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.fmean(r[key][k] for r in runs) for k in value}
        else:
            out[key] = statistics.fmean(r[key] for r in runs)
    return out


def print_table(res: dict[str, Any]) -> None:
    print(
        f"\n== {res['trace']}: first {res['requests']} requests, {res['backends']} backends, "
        f"capacity {res['capacity_rps']:.2f} req/s; no router's p99 TTFT can be below "
        f"{res['ttft_p99_floor']:.2f} s (p99 of each prompt's prefill alone, every earlier prefix cached) =="
    )
    # Each load as given (as the JSON keys have it): until review R88 one decimal, so 0.84 and
    # 0.76 both read 0.8, one inside the goals' window of 0.8 to 1.0 and one outside.
    width = max(4, *(len(load) for per_load in res["routers"].values() for load in per_load))
    head = (
        f"{'router':20s} {'load':>{width}s} {'mean':>7s} {'p50':>6s} {'p90':>7s} {'p99':>7s} {'tpot':>6s} "
        f"{'e2e50':>6s} {'qd99':>6s} {'hit':>5s} {'good':>5s} {'shed':>5s} {'c0':>5s} {'c1':>5s} {'c2':>5s} {'jain':>5s}"
    )
    print(head)
    for name, per_load in res["routers"].items():
        for load, f in per_load.items():
            c = f["slo_by_class"]
            print(
                f"{name:20s} {load:>{width}s} {f['ttft_mean']:7.2f} {f['ttft_p50']:6.2f} {f['ttft_p90']:7.2f} "
                f"{f['ttft_p99']:7.2f} {f['tpot_mean'] * 1000:5.1f}m {f['e2e_p50']:6.1f} {f['queue_delay_p99']:6.2f} "
                f"{f['prefix_hit_rate']:5.3f} "
                f"{f['goodput']:5.3f} {f['shed']:5.3f} {c['0']:5.2f} {c['1']:5.2f} {c['2']:5.2f} {f['jain_tenants']:5.3f}"
            )


def plot_file(path: Path) -> Path:
    """The file ``plot`` writes for ``--plot PATH``: ``PATH``, or ``PATH.png`` where its name has
    no extension (matplotlib saves it there, in its default format). Checked before any replay
    (until review R85 a path it could not write ended the run with a traceback after every replay,
    its figures lost, and a directory ``DIR`` was written as ``DIR.png`` but printed as ``DIR``).
    Raises ``ValueError`` saying why for an extension matplotlib does not write, a directory, or
    a place where no file can be written; writes nothing (a directory it would make is not made)."""
    from matplotlib import rcParams
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if not path.name.strip("."):
        raise ValueError(f"{str(path)!r} names no file")
    written = path if path.suffix else path.with_name(f"{path.name.rstrip('.')}.{rcParams['savefig.format']}")
    if written.suffix[1:].lower() not in formats:
        raise ValueError(
            f"{str(path)!r}: matplotlib writes no {written.suffix!r} file; name one of "
            + ", ".join(f".{each}" for each in formats)
        )
    try:
        if written.is_dir():
            raise ValueError(f"{str(written)!r} is a directory")
        if written.exists():
            with written.open("ab"):  # opened to append, so that what it holds stays as it is
                pass
        else:
            existing = next(parent for parent in written.parents if parent.exists())
            if not existing.is_dir():
                raise ValueError(f"{str(existing)!r} is not a directory")
            with tempfile.TemporaryFile(dir=existing):
                pass
    except OSError as error:
        raise ValueError(f"cannot write {str(written)!r} ({error.strerror or error})") from None
    return written


def plot(all_results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(all_results), figsize=(7 * len(all_results), 5), squeeze=False)
    for ax, res in zip(axes[0], all_results, strict=True):
        for name, per_load in res["routers"].items():
            xs = [float(x) for x in per_load]
            ax.plot(
                xs,
                [per_load[x]["ttft_p99"] for x in per_load],
                marker="o",
                label=name,
                linewidth=3 if name == "agentgate" else 1.2,
            )
        ax.set_yscale("log")
        ax.set_xlabel("offered load (fraction of estimated capacity)")
        ax.set_ylabel("p99 TTFT (s)")
        ax.set_title(f"{res['trace']} ({res['requests']} requests)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def trace_kind(name: str) -> str:
    """What the JSON keys of a trace's figures start with, from its file name: ``mooncake`` or
    ``azure`` where the name says so in any case (their goals are measured on them), else the name
    without its extension. Until review R88 ``Azure`` was looked for in that case only, so an
    Azure trace named ``azure.csv`` had no goal and keys holding its dot."""
    lowered = name.lower()
    return "mooncake" if "mooncake" in lowered else "azure" if "azure" in lowered else Path(name).stem


class Unmeasured(Exception):
    """A goal whose loads were replayed but which has no value: a router it compares served no
    request there, so the figure it divides is the p99 or mean of nothing."""


def _known(value: float) -> bool:
    """Whether a figure has a value: ``figures`` makes NaN of a percentile or mean of nothing."""
    return not math.isnan(value)


def _best(per_router: dict[str, dict[str, Any]], key: str) -> float:
    """The lowest ``key`` of the routers that have one (NaN where none has: none served a
    request). ``min`` alone would keep or skip a NaN by its place in the list."""
    return min((v for f in per_router.values() if _known(v := f[key])), default=math.nan)


def _unserved(own: float, best: float, load: object, baselines: str) -> str | None:
    """Why agentgate's figure over the best of ``baselines``' has no value at ``load`` (a router
    that served no request there), or ``None`` when both have one."""
    if not _known(own):
        return f"agentgate served no request at load {load}"
    return None if _known(best) else f"no {baselines} served a request at load {load}"


def goals(all_results: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON line's figures and goals from ``run_trace``'s results. A figure with no value (the
    p99 or mean of no request served: every prompt larger than the KV cache, say) is left out, as
    a goal is outside its loads; until review R90 it was written as NaN, which is not JSON.

    Raises ``Unmeasured`` naming each goal whose loads were replayed but that has no value: a run
    that measured nothing has no goals line, as ``broker.py``'s refuses one (until review R90 such
    a goal's value was NaN, and the sanity ordering of three means of nothing read 0)."""
    figs: dict[str, Any] = {}
    gl: dict[str, Any] = {}
    unmeasured: list[str] = []
    for res in all_results:
        routers_ = res["routers"]
        tag = trace_kind(res["trace"])
        for name, per_load in routers_.items():
            for load, f in per_load.items():
                for key in ("ttft_mean", "ttft_p99", "queue_delay_p99", "goodput", "shed", "prefix_hit_rate"):
                    if _known(f[key]):
                        figs[f"{tag}.{name}.load{load}.{key}"] = round(f[key], 4)
        loads = list(routers_["agentgate"])
        if tag == "mooncake":
            # The sanity ordering is the Mooncake paper's at load 1.0 (docs/measurements.md): a
            # run without 1.0 has no value for it, as the two goals below have none outside their
            # loads (until review R87 it was measured at the highest load up to 1.0, or the first,
            # under the same name).
            gate_load = next((x for x in loads if float(x) == 1.0), None)
            if gate_load is not None:
                sanity = "mooncake_sanity_random_gt_lb_gt_cache_aware"
                ordered = ("random", LOAD_BALANCED, CACHE_AWARE)
                idle_routers = [n for n in ordered if not _known(routers_[n][gate_load]["ttft_mean"])]
                if idle_routers:
                    unmeasured.append(
                        f"{sanity} ({', '.join(idle_routers)} served no request at load {gate_load})"
                    )
                else:
                    r, lb, ca = (routers_[n][gate_load]["ttft_mean"] for n in ordered)
                    gl[sanity] = {"value": 1 if r > lb > ca else 0, "limit": 1, "better": "higher"}
                    figs["mooncake.sanity_mean_ttft"] = {
                        "load": gate_load,
                        "random": r,
                        "load_balanced": lb,
                        "cache_aware": ca,
                    }
            # The two goals are the at loads 0.8 to 1.0: a run at none of them (--load 0.5)
            # has no value for them, rather than one measured at another load under their name.
            window = [x for x in loads if 0.8 <= float(x) <= 1.0]
            if not window:
                continue
            ratios, gaps, delays, floors, idle = [], [], [], [], []
            for x in window:
                base = {n: per[x] for n, per in routers_.items() if n != "agentgate"}
                own, best_delay = routers_["agentgate"][x]["queue_delay_p99"], _best(base, "queue_delay_p99")
                # A baseline with no queueing delay at all (a light load, a short trace): equal if
                # agentgate has none either, else no ratio (until review R66, ZeroDivisionError).
                if _known(own) and _known(best_delay) and (best_delay > 0 or own == 0):
                    delays.append(own / best_delay if best_delay > 0 else 1.0)
                own_p99, best_p99 = routers_["agentgate"][x]["ttft_p99"], _best(base, "ttft_p99")
                if unserved := _unserved(own_p99, best_p99, x, "baseline"):
                    idle.append(unserved)
                else:
                    ratios.append(own_p99 / best_p99)
                    floors.append(res["ttft_p99_floor"] / best_p99)
                gaps.append(routers_["agentgate"][x]["goodput"] - max(f["goodput"] for f in base.values()))
            if delays:
                figs["mooncake.queue_delay_p99_vs_best_baseline_load_0.8_1.0"] = round(max(delays), 4)
            # No router's p99 can go below the floor: where this exceeds 0.8, so does every router.
            figs["mooncake.ttft_p99_floor_s"] = round(res["ttft_p99_floor"], 4)
            p99_goal = "mooncake_p99_ttft_vs_best_baseline_load_0.8_1.0"
            if idle:
                unmeasured.append(f"{p99_goal} ({'; '.join(idle)})")
            else:
                figs["mooncake.ttft_p99_floor_vs_best_baseline_load_0.8_1.0"] = round(max(floors), 4)
                gl[p99_goal] = {"value": round(max(ratios), 4), "limit": 0.8, "better": "lower"}
            gl["mooncake_goodput_minus_best_baseline_load_0.8_1.0"] = {
                "value": round(min(gaps), 4),
                "limit": 0.0,
                "better": "higher",
            }
        elif tag == "azure":
            ratios, idle = [], []
            for x in loads:
                own_p99 = routers_["agentgate"][x]["ttft_p99"]
                best = _best({n: routers_[n][x] for n in LOAD_BASED}, "ttft_p99")
                if unserved := _unserved(own_p99, best, x, "load-based baseline"):
                    idle.append(unserved)
                else:
                    ratios.append(own_p99 / best)
            if idle:
                unmeasured.append(f"azure_p99_ttft_vs_best_load_based ({'; '.join(idle)})")
            else:
                gl["azure_p99_ttft_vs_best_load_based"] = {
                    "value": round(max(ratios), 4),
                    "limit": 1.05,
                    "better": "lower",
                }
    if unmeasured:
        raise Unmeasured(", ".join(unmeasured))
    return figs, gl


def _scrape_s(text: str) -> float:
    """An argparse type: a scrape interval in seconds, finite and at least ``MIN_SCRAPE_INTERVAL_S``
    (``replay`` refuses a shorter one, which kept it from ever returning)."""
    value = positive(text)
    if value < MIN_SCRAPE_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_SCRAPE_INTERVAL_S:g} s: {text!r}")
    return value


MAX_BACKENDS = 1024
"""The most ``--backends`` taken: a pool 128 times the default's 8, where every router scores every
backend for each request (until review R88 any whole number was taken: one too big for a float
ended in an ``OverflowError`` traceback, and 100,000 printed nothing in a minute at 600 MB)."""


MAX_SEEDS = 100
"""The most ``--seeds`` taken: each seed replays every trace at every load through every router,
so 100 is a hundred times the default run (until review R88c any number of digits was taken, and
ran without end)."""


MAX_LOAD = 10.0
"""The most ``--load`` taken: ten times the pool's estimated capacity, an overload no queue clears."""


_LOAD = offered_load(MAX_LOAD)


def _loads(text: str) -> list[float]:
    """An argparse type: comma-separated offered loads, each from ``MIN_LOAD`` to ``MAX_LOAD``."""
    return [_LOAD(part.strip()) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", type=Path, help="trace file (repeatable); default: both")
    # Each of --load and --limit given is kept with --quick, which sets only those not given (as
    # tasks.py's, audit.py's and dispatch_http.py's --quick do): until review R87 --quick
    # replaced --load, and kept --limit only below 1,000.
    ap.add_argument(
        "--load",
        type=_loads,
        default=None,
        help=f"comma-separated, each {MIN_LOAD:g} to {MAX_LOAD:g} (default 0.5,0.8,1.0,1.1; --quick: 0.8,1.0)",
    )
    ap.add_argument(
        "--seeds",
        type=whole_up_to(1, MAX_SEEDS, "replays of every trace, load and router"),
        default=1,
        help=f"seeds averaged, 1 to {MAX_SEEDS:,} (default 1)",
    )
    ap.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="first N requests of each trace (default 3000; --quick: 1000)",
    )
    ap.add_argument(
        "--backends",
        type=whole_up_to(1, MAX_BACKENDS, "simulated backends"),
        default=8,
        help=f"simulated backends, 1 to {MAX_BACKENDS:,} (default 8)",
    )
    ap.add_argument(
        "--scrape",
        type=_scrape_s,
        default=0.5,
        help=f"metrics scrape interval (s), at least {MIN_SCRAPE_INTERVAL_S:g}",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="1000 requests, loads 0.8 and 1.0, where --limit and --load name none",
    )
    ap.add_argument("--plot", type=Path, default=REPO / "out" / "dispatch_p99_ttft.png")
    ap.add_argument("--json", action="store_true", help="print the JSON line (always printed last)")
    args = ap.parse_args(argv)
    try:
        plot_to = plot_file(args.plot)
    except ValueError as exc:
        ap.error(f"argument --plot: {exc}")
    loads = args.load if args.load is not None else [0.8, 1.0] if args.quick else [0.5, 0.8, 1.0, 1.1]
    limit = args.limit if args.limit is not None else 1000 if args.quick else 3000
    # Every trace is read before any replay: a missing or malformed one (they come from
    # ../shared/data/traces/, never downloaded) ends the run at once, without a goals line.
    traces: list[tuple[Path, list[TraceRequest]]] = []
    for path in args.trace or DEFAULT_TRACES:
        try:
            requests = load_trace(path, limit=limit)
        except InputError as exc:
            print(f"dispatch: {exc}", file=sys.stderr)
            return 2
        if not requests:
            print(f"dispatch: {path}: no requests to replay", file=sys.stderr)
            return 2
        if len(requests) > 1 and requests[-1].arrival == requests[0].arrival:
            # ``scale`` has no span to stretch: every load would replay the same arrivals under
            # its own label (until review R82, the first 10 Mooncake rows, all at 0). One request
            # alone meets no other at any load: replayed as it is.
            print(
                f"dispatch: {path}: its first {len(requests)} requests arrive at one time, so no "
                "--load can set their rate: replay more of it (--limit)",
                file=sys.stderr,
            )
            return 2
        if not any(r.prompt_tokens or r.output_tokens for r in requests):
            # No work to set a capacity by, so no rate for any --load (until review R90,
            # ZeroDivisionError in ``capacity_rps``).
            print(
                f"dispatch: {path}: its first {len(requests)} requests have 0 tokens in and 0 out, "
                "so no capacity or --load can be set from them: replay more of it (--limit)",
                file=sys.stderr,
            )
            return 2
        # One set of figures per kind of trace: a second of a kind would write its figures under
        # the first's keys (until review R88 the last one's were kept, both tables printed).
        kind = trace_kind(path.name)
        earlier = next((seen for seen, _ in traces if trace_kind(seen.name) == kind), None)
        if earlier is not None:
            print(
                f"dispatch: {path}: a second trace of kind {kind!r} (after {earlier}), whose figures "
                "would replace the first's: give one trace of each kind per run",
                file=sys.stderr,
            )
            return 2
        traces.append((path, requests))
    all_results = []
    for path, requests in traces:
        res = run_trace(path, requests, loads, args.seeds, args.backends, args.scrape)
        print_table(res)
        all_results.append(res)
    plot(all_results, plot_to)
    print(f"\nplot: {plot_to}")
    try:
        figs, gl = goals(all_results)
    except Unmeasured as exc:
        print(f"dispatch: no value for goal {exc}: no JSON line", file=sys.stderr)
        return 1
    figs["config"] = {
        "limit": limit,
        "loads": loads,
        "seeds": args.seeds,
        "backends": args.backends,
        "model": MODEL.name,
        "scrape_interval_s": args.scrape,
    }
    print(json.dumps({"benchmark": "dispatch", "figures": figs, "goals": gl}, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
