"""Review R66 of ``benchmarks/dispatch.py`` (the trace replay on simulated backends) on short or
light traces.

Its figures divided and averaged without looking: a trace whose answers are all one token long
(no request has a time per output token) ended in ``StatisticsError`` from ``fmean`` of nothing,
and a run where the best baseline had no queueing delay at all (one request, ``--limit 1``, at
load 0.9) in ``ZeroDivisionError``, each a traceback instead of the table and its JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("r66_bench_dispatch", ROOT / "benchmarks" / "dispatch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _refuse_constant(text: str) -> Any:
    raise AssertionError(f"not strict JSON: {text}")


def _last_line(out: str) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(out.rstrip("\n").splitlines()[-1], parse_constant=_refuse_constant)
    assert line["benchmark"] == "dispatch" and line["goals"]
    return line


def test_a_trace_of_one_token_answers_is_replayed_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: ``statistics.StatisticsError: fmean requires at least one data point`` (the
    mean time per output token of requests that have no second token)."""
    trace = tmp_path / "mooncake_one_token.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 100, "output_length": 1, "hash_ids": [2]}\n'
    )
    args = ["--trace", str(trace), "--load", "0.9", "--backends", "1", "--plot", str(tmp_path / "p.png")]
    assert _bench().main(args) == 0
    out = capsys.readouterr().out
    assert " nanm " in out  # the table's tpot column: no figure, not a traceback
    _last_line(out)


def test_a_run_whose_best_baseline_never_queues_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: ``--limit 1 --load 0.9`` ended in ``ZeroDivisionError`` (agentgate's p99
    queueing delay over the best baseline's, which was 0). Both 0: the ratio is 1."""
    args = ["--trace", str(MOONCAKE), "--limit", "1", "--load", "0.9", "--backends", "1"]
    assert _bench().main([*args, "--plot", str(tmp_path / "p.png")]) == 0
    figures = _last_line(capsys.readouterr().out)["figures"]
    assert figures["mooncake.queue_delay_p99_vs_best_baseline_load_0.8_1.0"] == 1.0
