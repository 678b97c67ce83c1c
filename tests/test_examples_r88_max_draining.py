"""Review R88: ``broker.py --max-draining`` took any whole number, and one too big for a float
(401 digits) ended the run in the broker's ``BrokerError`` traceback after the jobs were drawn.
It now takes 0 to 32 (a draining gang reserves 2 or more of the 64 GPUs) and refuses another with
argparse's one line, the number cut at 60 characters, and status 2."""

from __future__ import annotations

import pytest
from test_benchmarks_r57_contract import _load

SAYS = "error: argument --max-draining: must be 0 or more and 32 or less (a draining gang reserves 2 or more of the 64 GPUs): "


@pytest.mark.parametrize("value", ["1" + "0" * 400, "33", "-1"])
def test_a_max_draining_past_what_can_drain_ends_with_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        _load("broker").main(["--quick", "--json", f"--max-draining={value}"])
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    last = err.splitlines()[-1]
    assert SAYS in last and len(last) < 300, last


@pytest.mark.parametrize("value", ["0", "1", "32"])
def test_a_max_draining_from_0_to_32_is_taken(value: str) -> None:
    broker = _load("broker")
    assert broker.whole_up_to(0, broker.MOST_DRAINING, "")(value) == int(value)
