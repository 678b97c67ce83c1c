"""Review R90: ``benchmarks/dispatch.py`` wrote NaN into its JSON line, goals included, where no
request of a trace was served (two 1,000,000-token prompts, which ``load_trace`` takes and no
H200's KV cache holds): the p99 and mean TTFT of nothing, and the ratios made of them. Strict JSON
parsers refuse NaN. A figure with no value is now left out, and a goal whose loads were replayed
but that has no value ends the run with status 1 and a line naming it, with no JSON line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load, _refuse_constant, _replayed

_P99_GOAL = "mooncake_p99_ttft_vs_best_baseline_load_0.8_1.0"
_SANITY = "mooncake_sanity_random_gt_lb_gt_cache_aware"


def _unservable(path: Path) -> Path:
    """Two prompts of 1,000,000 tokens: larger than the simulated KV cache, so every router sheds both."""
    blocks = -(-1_000_000 // 512)
    rows = (
        {
            "timestamp": ts,
            "input_length": 1_000_000,
            "output_length": 8,
            "hash_ids": list(range(i * blocks, (i + 1) * blocks)),
        }
        for i, ts in enumerate((0, 1000))
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run(trace: Path, tmp_path: Path) -> int:
    args = [
        "--trace",
        str(trace),
        "--load",
        "1.0",
        "--backends",
        "1",
        "--json",
        "--plot",
        str(tmp_path / "p.png"),
    ]
    result: int = _load("dispatch").main(args)
    return result


def test_a_goal_nothing_measured_ends_the_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(_unservable(tmp_path / "mooncake_big.jsonl"), tmp_path) == 1
    out, err = capsys.readouterr()
    assert not out.rstrip("\n").splitlines()[-1].startswith("{")
    assert err.startswith("dispatch: no value for goal ") and err.count("\n") == 1
    assert _P99_GOAL in err and _SANITY in err and "agentgate served no request at load 1.0" in err


def test_figures_with_no_value_are_left_out_of_a_strict_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace of no known kind has no goals: its line is written, without the figures of nothing."""
    assert _run(_unservable(tmp_path / "big.jsonl"), tmp_path) == 0
    line = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    figures = json.loads(line, parse_constant=_refuse_constant)["figures"]
    assert figures["big.agentgate.load1.0.shed"] == 1.0
    assert not any(key.endswith((".ttft_mean", ".ttft_p99", ".queue_delay_p99")) for key in figures)


def test_a_load_agentgate_served_nothing_at_leaves_the_p99_goal_without_value() -> None:
    bench = _load("dispatch")
    result = _replayed(["0.8", "1.0"])
    result["routers"]["agentgate"]["0.8"]["ttft_p99"] = math.nan
    with pytest.raises(bench.Unmeasured, match=r"agentgate served no request at load 0\.8"):
        bench.goals([result])


def test_the_best_baseline_is_the_lowest_p99_of_those_that_served() -> None:
    """``min`` of a list starting with NaN is NaN: the first baseline serving nothing made the ratio NaN."""
    result = _replayed(["1.0"])
    result["routers"]["random"]["1.0"]["ttft_p99"] = math.nan
    result["routers"]["mooncake"]["1.0"]["ttft_p99"] = 4.5
    _, goals = _load("dispatch").goals([result])
    assert goals[_P99_GOAL]["value"] == 2.0


def test_an_azure_goal_with_no_load_based_baseline_serving_has_no_value() -> None:
    bench = _load("dispatch")
    served = dict.fromkeys(
        ("ttft_mean", "ttft_p99", "queue_delay_p99", "shed", "prefix_hit_rate", "goodput"), 1.0
    )
    unserved = served | {"ttft_mean": math.nan, "ttft_p99": math.nan, "queue_delay_p99": math.nan}
    routers = {name: {"1.0": dict(unserved)} for name in bench.LOAD_BASED} | {"agentgate": {"1.0": served}}
    result = {"trace": "azure.csv", "ttft_p99_floor": 0.5, "routers": routers}
    with pytest.raises(bench.Unmeasured, match=r"azure_p99_ttft_vs_best_load_based \(no load-based baseline"):
        bench.goals([result])
