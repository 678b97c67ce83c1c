"""Review R88c: ``dispatch.py --seeds`` and ``tasks.py --repeat`` took any whole number above 0, so
one of many digits ran without end (each seed replays every trace, load and router; each repeat
runs every figure). They now take 1 to 100 (``MAX_SEEDS``, ``MAX_REPEAT``, docs/dispatch.md and
docs/tasks.md) and refuse another with argparse's one line, the number cut at 60 characters, and
status 2, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load
from test_examples_r88_backends import _dispatch_refusal

DOCS = Path(__file__).resolve().parents[1] / "docs"
TOO_MANY = ["1" + "0" * 400, "101", "0", "-3"]


def _ended(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("value", TOO_MANY)
def test_seeds_past_what_a_run_can_replay_end_with_one_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _dispatch_refusal(tmp_path, capsys, "--seeds", value)
    says = "error: argument --seeds: must be 1 or more and 100 or less (replays of every trace, load and router): "
    assert says in last and len(last) < 250, last


@pytest.mark.parametrize("value", TOO_MANY)
def test_repeats_past_what_a_run_can_time_end_with_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        _load("tasks").main(["--calls", "8", "--repeat", value])
    assert ended.value.code == 2
    last = _ended(capsys)
    assert "error: argument --repeat: must be 1 or more and 100 or less (runs of every figure): " in last
    assert len(last) < 250, last


def test_the_documented_bounds_are_the_ones_taken() -> None:
    assert _load("dispatch").MAX_SEEDS == 100
    assert _load("tasks").MAX_REPEAT == 100
    assert "`--seeds` takes 1 to 100" in (DOCS / "dispatch.md").read_text()
    assert "`--repeat` 1 to 100" in (DOCS / "tasks.md").read_text()
