"""Review R87: ``benchmarks/dispatch.py``'s ``mooncake_sanity_random_gt_lb_gt_cache_aware`` goal is
the Mooncake paper's ordering at load 1.0, but a run without 1.0 among ``--load`` measured it at
the highest load up to 1.0 (or the first) under the same name, where the two other Mooncake goals
have no value outside their loads (review R57). It is now left out of such a run, with its
figure, as they are."""

from __future__ import annotations

from test_benchmarks_r57_contract import _load, _replayed

_SANITY = "mooncake_sanity_random_gt_lb_gt_cache_aware"


def _ordered(loads: list[str], at: str) -> dict[str, object]:
    """A replay where the paper's ordering (random > load-balanced > cache-aware) holds at ``at`` only."""
    result = _replayed(loads)
    for name, mean in (("random", 3.0), ("load-balanced", 2.0), ("mooncake", 1.0)):
        result["routers"][name][at]["ttft_mean"] = mean
    return result


def test_a_run_without_load_1_has_no_sanity_goal() -> None:
    bench = _load("dispatch")
    for loads in (["0.5"], ["0.5", "0.8"], ["1.1"]):
        figs, goals = bench.goals([_ordered(loads, loads[0])])
        assert _SANITY not in goals and "mooncake.sanity_mean_ttft" not in figs, loads


def test_the_sanity_goal_is_measured_at_load_1() -> None:
    bench = _load("dispatch")
    figs, goals = bench.goals([_ordered(["0.8", "1.0"], "1.0")])
    assert goals[_SANITY]["value"] == 1 and figs["mooncake.sanity_mean_ttft"]["load"] == "1.0"
    _, goals = bench.goals([_ordered(["0.8", "1.0"], "0.8")])
    assert goals[_SANITY]["value"] == 0
