"""Review R88: ``dispatch.py --backends`` took any whole number above 0: one too big for a float
ended in a bare ``OverflowError`` traceback (the pool's capacity, backends / work), and 100,000
printed nothing in a minute at 600 MB. It now takes 1 to 1,024 (``MAX_BACKENDS``, docs/dispatch.md)
and refuses another with argparse's one line, the number cut at 60 characters, and status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load

SAYS = "error: argument --backends: must be 1 or more and 1,024 or less (simulated backends): "


def _dispatch_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> str:
    """The last line ``dispatch.py`` writes given ``option value`` on a two-request trace, once it
    has ended with status 2, nothing on stdout, no traceback and no plot."""
    trace = tmp_path / "mooncake_two.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 100, "output_length": 2, "hash_ids": [2]}\n'
    )
    args = ["--trace", str(trace), "--load", "0.9", option, value, "--plot", str(tmp_path / "p.png")]
    with pytest.raises(SystemExit) as ended:
        _load("dispatch").main(args)
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    assert not (tmp_path / "p.png").exists()
    return err.splitlines()[-1]


@pytest.mark.parametrize("value", ["1" + "0" * 400, "1025", "0"])
def test_a_pool_past_what_a_run_can_replay_ends_with_one_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _dispatch_refusal(tmp_path, capsys, "--backends", value)
    assert SAYS in last and len(last) < 250, last


def test_the_documented_bound_is_the_one_taken() -> None:
    dispatch = _load("dispatch")
    assert dispatch.MAX_BACKENDS == 1024
    assert "1 to 1,024" in (Path(__file__).resolve().parents[1] / "docs" / "dispatch.md").read_text()
