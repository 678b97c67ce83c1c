"""Review R87: ``benchmarks/broker.py --spread-slowdown`` ("times slower" a communication-bound
gang runs across NVLink domains) took any number above 0. At 0.1 such a gang ran ten times
faster spread out, the table reported more useful GPU-seconds than GPU-seconds held (utilization
0.885 above occupancy 0.617) and the goals line was built on it. A slowdown under 1 (or not
finite) now ends the run with argparse's one line and status 2, before anything is simulated."""

from __future__ import annotations

import pytest

from benchmarks import _args, broker


@pytest.mark.parametrize("text", ["0.1", "0.999", "nan", "inf"])
def test_a_slowdown_below_1_ends_the_run_with_one_line_and_status_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        broker.main(["--quick", "--spread-slowdown", text])
    assert ended.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1].endswith(
        f"argument --spread-slowdown: must be a finite number of 1 or more (times slower): {text!r}"
    )


@pytest.mark.parametrize("text", ["1", "1.5", "4"])
def test_a_slowdown_of_1_or_more_is_taken(text: str) -> None:
    assert _args.slowdown(text) == float(text)
