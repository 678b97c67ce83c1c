"""Review R85: ``--seed`` of broker.py and dispatch_http.py took any whole number, and
``random.Random`` seeds with its absolute value: ``--seed -1`` replayed seed 1's draw under the
label -1. A negative seed now ends the run with argparse's one line and status 2."""

from __future__ import annotations

import sys

import pytest
from test_benchmarks_r57_contract import _load

SAYS = "error: argument --seed: must be a whole number 0 or more (random.Random reads -N as N): "


@pytest.mark.parametrize("value", ["-1", "-7", "x"])
def test_broker_refuses_a_negative_seed(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        _load("broker").main(["--quick", "--json", f"--seed={value}"])
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.endswith(SAYS + repr(value)) or last.endswith(
        f"error: argument --seed: not a whole number: {value!r}"
    )


def test_dispatch_http_refuses_a_negative_seed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["dispatch_http.py", "--rounds", "1", "--warmup", "0", "--seed=-1"])
    with pytest.raises(SystemExit) as ended:
        _load("dispatch_http").main()
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and err.splitlines()[-1].endswith(SAYS + "'-1'")


@pytest.mark.parametrize("value", ["0", "1", str(2**70)])
def test_a_seed_of_0_or_more_is_taken(value: str) -> None:
    assert _load("broker").random_seed(value) == int(value)
