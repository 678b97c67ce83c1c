"""Review R85: ``--load`` took any finite number above 0, and some never ended a run:
``broker.py --load 1e6`` drew about 3e8 jobs into memory before simulating any, and
``dispatch.py --load 1e-6`` scaled a trace's arrivals to times its replay did not reach. Each now
takes an offered load from 0.001 to its own most (broker.py 2, whose run time grows faster than
its job count; dispatch.py 10) and refuses another with argparse's one line and status 2, before
anything runs (``benchmarks/_args.py``)."""

from __future__ import annotations

import pytest
from test_benchmarks_r57_contract import _load

MOST = {"broker": 2, "dispatch": 10}


@pytest.mark.parametrize("script", ["broker", "dispatch"])
@pytest.mark.parametrize("load", ["1e6", "10.5", "0.0009", "1e-6", "1e-300"])
def test_a_load_outside_the_range_ends_with_one_line_and_status_2(
    script: str, load: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load(script)
    with pytest.raises(SystemExit) as ended:
        bench.main(["--quick", "--json", "--load", load])
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert err.splitlines()[-1].endswith(
        f"error: argument --load: must be an offered load from 0.001 to {MOST[script]} (times capacity): {load!r}"
    )
    assert '"goals"' not in out and "Traceback" not in err


def test_the_broker_refuses_more_than_twice_its_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _load("broker").main(["--quick", "--json", "--load", "2.5"])
    assert "must be an offered load from 0.001 to 2 (times capacity): '2.5'" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["broker", "dispatch"])
def test_the_range_holds_its_ends(script: str) -> None:
    load = _load("broker").offered_load(MOST[script])
    assert load("0.001") == 0.001 and load(str(MOST[script])) == MOST[script]
    assert MOST[script] == _load(script).MAX_LOAD
