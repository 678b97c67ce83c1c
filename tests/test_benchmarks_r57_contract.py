"""The benchmarks keep their contract on every input: one strict JSON line of numbers last when
they measured what their goals name, and otherwise a clear error and a non-zero exit, never a
traceback and never a goals line (review R57, benchmarks pass)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    """The benchmark as a module, registered (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(f"r57_bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _refuse_constant(text: str) -> Any:
    raise AssertionError(f"not strict JSON: {text}")


def _strict_last_line(name: str, output: str) -> dict[str, Any]:
    """The last line as a strict JSON parser reads it (no NaN or Infinity), of the promised shape."""
    result: dict[str, Any] = json.loads(output.rstrip("\n").splitlines()[-1], parse_constant=_refuse_constant)
    assert set(result) == {"benchmark", "figures", "goals"} and result["benchmark"] == name
    assert result["goals"]
    for goal in result["goals"].values():
        assert set(goal) == {"value", "limit", "better"} and goal["better"] in ("lower", "higher")
        for number in (goal["value"], goal["limit"]):
            assert isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number)
    return result


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )


def _refused(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert '"goals"' not in done.stdout


def test_broker_quick_json_is_strict_and_names_its_goals() -> None:
    done = _run(str(BENCHMARKS / "broker.py"), "--quick", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    result = _strict_last_line("broker", done.stdout)
    assert result["figures"]["agentgate_comm_grants"] > 0


def test_broker_without_a_communication_bound_grant_claims_no_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R57: a run granting no communication-bound gang reported 1.0 in one domain, goal met."""
    bench = _load("broker")
    assert bench.main(["--quick", "--json", "--load", "0.005"]) == 1  # seed 1: one job, not one such gang
    out, err = capsys.readouterr()
    assert '"goals"' not in out
    assert "no communication-bound gang" in err


@pytest.mark.parametrize("load", ["0", "-1", "nan", "inf", "lots"])
def test_broker_refuses_a_load_it_cannot_offer(load: str) -> None:
    """Review R57: --load 0 ended in a ZeroDivisionError traceback."""
    _refused(_run(str(BENCHMARKS / "broker.py"), "--quick", "--json", "--load", load))


@pytest.mark.parametrize("args", [["--calls", "0"], ["--calls", "3"], ["--repeat", "0"], ["--calls", "x"]])
def test_tasks_refuses_counts_it_cannot_time(args: list[str]) -> None:
    """Review R57: --calls 0, --calls 3 or --repeat 0 ended in a ZeroDivisionError or ValueError traceback."""
    _refused(_run(str(BENCHMARKS / "tasks.py"), "--json", *args))


@pytest.mark.parametrize("name", ["tasks", "audit", "authority", "langgraph_overhead"])
def test_benchmark_times_the_agentgate_of_its_own_tree(tmp_path: Path, name: str) -> None:
    """Review R57: tasks.py, audit.py, authority.py and langgraph_overhead.py imported whichever
    agentgate was installed (in a worktree, the main checkout's). Only a tree other than the one
    installed can tell: in the checkout the venv was made from, both are the same file."""
    probe = "import runpy, sys; runpy.run_path(sys.argv[1]); print(sys.modules['agentgate'].__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(BENCHMARKS / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).resolve() == ROOT / "agentgate" / "__init__.py"


@pytest.mark.parametrize("entries", ["0", "-5", "many"])
def test_audit_refuses_an_entry_count_it_would_not_verify(entries: str) -> None:
    """Review R57: audit.py --entries 0 verified 50,000 entries and -5 ended in a traceback."""
    _refused(_run(str(BENCHMARKS / "audit.py"), "--quick", "--json", "--entries", entries))


def _bad_trace(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "absent.jsonl"
    path = tmp_path / f"{kind}.jsonl"
    path.write_text("" if kind == "empty" else '{"timestamp": 0, "input_length": "x"}\n')
    return path


@pytest.mark.parametrize("kind", ["missing", "empty", "malformed"])
def test_dispatch_refuses_a_trace_it_cannot_read_before_replaying_any(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: a missing, empty or malformed --trace ended in an InputError or StatisticsError
    traceback (after replaying the traces named before it)."""
    bench = _load("dispatch")
    path = _bad_trace(tmp_path, kind)
    assert bench.main(["--quick", "--json", "--trace", str(path), "--plot", str(tmp_path / "p.png")]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"dispatch: {path}") and '"goals"' not in out


@pytest.mark.parametrize(
    "args", [["--load", "abc"], ["--load", "0.8,0"], ["--load", "nan"], ["--scrape", "0"], ["--limit", "0"]]
)
def test_dispatch_refuses_arguments_it_cannot_replay(args: list[str]) -> None:
    """Review R57: --load abc ended in a ValueError traceback, --limit 0 in a StatisticsError one."""
    _refused(_run(str(BENCHMARKS / "dispatch.py"), "--quick", "--json", *args))


def test_dispatch_http_leaves_out_the_litellm_goal_it_could_not_measure() -> None:
    """Review R57: without LiteLLM importable, dispatch_http's goal line held "value": null."""
    bench = _load("dispatch_http")
    output = "table\n" + json.dumps(
        {"benchmark": "dispatch_http", "figures": {}, "goals": bench.goals_of(3.4, None)}
    )
    assert set(_strict_last_line("dispatch_http", output)["goals"]) == {"gateway_added_p50_ms"}
    measured = bench.goals_of(3.4, 0.55)
    assert measured["gateway_added_vs_litellm_added"] == {"value": 0.55, "limit": 0.5, "better": "lower"}
    assert measured["gateway_added_p50_ms"] == {"value": 3.4, "limit": 1.0, "better": "lower"}


SAVED_FIT = BENCHMARKS / "calibration" / "llama-3.1-8b-h200.json"


def test_calibrate_gpu_refit_of_the_saved_measurements_keeps_the_contract() -> None:
    done = _run(str(BENCHMARKS / "calibrate_gpu.py"), "--fit", str(SAVED_FIT), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _strict_last_line("calibrate_gpu", done.stdout)["figures"]["points"] > 0


def _saved_fit_without(change: str) -> str:
    data = json.loads(SAVED_FIT.read_text())
    if change == "no-prefill":
        del data["prefill"]
    elif change == "no-info":
        del data["info"]
    elif change == "string-seconds":
        data["decode"][0]["seconds"] = "fast"
    elif change == "one-decode-size":
        data["decode"] = [dict(data["decode"][0]) for _ in range(4)]
    return json.dumps(data)


@pytest.mark.parametrize(
    "content", ["missing", "not json", "[]", "no-prefill", "no-info", "string-seconds", "one-decode-size"]
)
def test_calibrate_gpu_refuses_measurements_it_cannot_fit(tmp_path: Path, content: str) -> None:
    """Review R57: --fit of a missing, non-JSON or incomplete file ended in a traceback."""
    path = tmp_path / "measured.json"
    if content != "missing":
        known = ("no-prefill", "no-info", "string-seconds", "one-decode-size")
        path.write_text(_saved_fit_without(content) if content in known else content)
    done = _run(str(BENCHMARKS / "calibrate_gpu.py"), "--fit", str(path), "--json")
    _refused(done)
    assert done.stderr.startswith("calibrate_gpu: ")


def _replayed(loads: list[str]) -> dict[str, Any]:
    """A replay's result as run_trace returns it, every router alike at every load."""
    point = dict.fromkeys(("ttft_mean", "queue_delay_p99", "shed", "prefix_hit_rate"), 1.0)
    point |= {"ttft_p99": 9.0, "goodput": 0.9}
    names = ("agentgate", "random", "load-balanced", "mooncake")
    return {
        "trace": "mooncake_conversation_trace.jsonl",
        "ttft_p99_floor": 8.0,
        "routers": {name: {load: dict(point) for load in loads} for name in names},
    }


def test_dispatch_names_no_goal_of_loads_it_did_not_replay() -> None:
    """Review R57: --load 0.5 reported mooncake_p99_ttft_vs_best_baseline_load_0.8_1.0 from load 0.5."""
    bench = _load("dispatch")
    _, at_half = bench.goals([_replayed(["0.5"])])
    assert not any("load_0.8_1.0" in goal for goal in at_half)
    _, in_window = bench.goals([_replayed(["0.5", "0.9"])])
    assert in_window["mooncake_p99_ttft_vs_best_baseline_load_0.8_1.0"]["value"] == 1.0
