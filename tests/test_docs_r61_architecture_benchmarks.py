"""docs/architecture.md's row for benchmarks/ read as a newcomer runs it: each file it calls a
benchmark runs alone with ``--json`` and ends with its JSON line, or the row gives the command
that does; a file that is no benchmark is named as such."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def _row() -> str:
    [row] = [line for line in PAGE.splitlines() if line.startswith("| `benchmarks/` |")]
    return row


def test_calibrate_gpu_without_a_gpu_runs_as_the_row_says() -> None:
    """Review R61: the row said every benchmark runs alone with `--json`; `calibrate_gpu.py --json`
    exits 1 without PyTorch and a CUDA GPU (neither a dependency), and the row did not give the
    `--fit` run that `make bench` and README use instead."""
    alone = subprocess.run(
        [sys.executable, "benchmarks/calibrate_gpu.py", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if alone.returncode == 0:
        return  # a machine with PyTorch and a GPU: the row's plain promise holds
    [fit] = re.findall(r"`calibrate_gpu\.py (--fit [^`]+)`", _row())
    done = subprocess.run(
        [sys.executable, "benchmarks/calibrate_gpu.py", *fit.split(), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["benchmark"] == "calibrate_gpu"


def test_every_file_of_benchmarks_that_is_no_benchmark_is_named_so() -> None:
    """Review R61: `benchmarks/_args.py` (the argument types the benchmarks share) is no benchmark
    and runs nothing; the row called every file one."""
    helpers = sorted(p.name for p in (ROOT / "benchmarks").glob("_*.py"))
    assert helpers, "benchmarks/ has no shared module any more: drop this test"
    for name in helpers:
        assert f"`{name}`" in _row(), name


def test_the_examples_row_names_each_example_and_what_they_share() -> None:
    """Review R61: the examples row said "runnable agents" and named none; `examples/_common.py`
    (their demo directory, keys, model and summary) is no agent."""
    [row] = [line for line in PAGE.splitlines() if line.startswith("| `examples/` |")]
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"`{path.name}`" in row, path.name
