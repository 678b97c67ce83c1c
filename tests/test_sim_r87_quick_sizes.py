"""Review R87: ``benchmarks/tasks.py --quick`` silently replaced ``--calls`` and ``--repeat`` with
2,000 and 2, and ``benchmarks/dispatch.py --quick`` replaced ``--load`` with 0.8,1.0 and kept a
``--limit`` only below 1,000: a run asked for one size and reported another. ``--quick`` now sets
only the sizes not given, in both (as ``audit.py --entries`` and ``dispatch_http.py --rounds``
already did)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load

from benchmarks import tasks

MOONCAKE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
)


@pytest.fixture
def small_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-at-a-limit figures at 10 and 20 holders, not 100 and 1,000: these tests read the
    sizes the run reports, not those figures (test_benchmarks_contract checks them at their own
    sizes), and the 1,000-holder cases were most of each run (~10 CPU-s of ~11)."""
    monkeypatch.setattr(tasks, "HELD_SIZES", (10, 20))


@pytest.mark.usefixtures("small_held")
def test_tasks_quick_keeps_the_calls_and_repeats_given(capsys: pytest.CaptureFixture[str]) -> None:
    tasks.main(["--quick", "--calls", "16", "--repeat", "1"])
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"16 no-op calls, .*, best of 1$", out[0]), out[0]
    assert json.loads(out[-1])["figures"]["calls"] == 16


@pytest.mark.usefixtures("small_held")
def test_tasks_quick_sets_the_sizes_not_given(capsys: pytest.CaptureFixture[str]) -> None:
    tasks.main(["--quick", "--calls", "16"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("16 no-op calls, ") and first.endswith("best of 2"), first


def test_dispatch_quick_keeps_the_loads_and_limit_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trace's first 30 requests: a limit past them reads them all, so a limit above
    # --quick's 1,000 costs nothing here.
    trace = tmp_path / "short.jsonl"
    with MOONCAKE.open() as lines:
        trace.write_text("".join(next(lines) for _ in range(30)))
    argv = ["--quick", "--trace", str(trace), "--limit", "1500", "--load", "0.9"]
    argv += ["--backends", "1", "--plot", str(tmp_path / "p.png")]
    bench = _load("dispatch")
    # The figures are what is checked: no plot (matplotlib takes a second to import).
    monkeypatch.setattr(bench, "plot_file", lambda path: path)
    monkeypatch.setattr(bench, "plot", lambda results, path: None)
    assert bench.main(argv) == 0
    config = json.loads(capsys.readouterr().out.splitlines()[-1])["figures"]["config"]
    assert (config["limit"], config["loads"]) == (1500, [0.9])
