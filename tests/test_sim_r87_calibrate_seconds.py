"""Review R87: ``calibrate_gpu.py --fit`` read a point's ``seconds`` with ``math.isfinite``, which
raises ``OverflowError`` on an integer too large for a float (``10**400``): the run ended in a
traceback where ``read_measurements`` promises a message naming the file. Such a time is now
refused as not a positive finite number, as NaN and 0 are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import SAVED_FIT, _load


@pytest.mark.parametrize(
    "seconds", [10**400, -(10**400), 0, True, "0.01"], ids=["10**400", "-10**400", "0", "true", "text"]
)
def test_a_time_that_is_no_positive_finite_number_is_refused_naming_the_file(
    seconds: object, tmp_path: Path
) -> None:
    data = json.loads(SAVED_FIT.read_text())
    data["decode"][0]["seconds"] = seconds
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    calibrate = _load("calibrate_gpu")
    with pytest.raises(SystemExit) as ended:
        calibrate.read_measurements(path)
    assert ended.value.code == (
        f"calibrate_gpu: --fit {path}: decode point 0 needs whole numbers batch and context from 0 "
        "to 2**30 and a positive number of seconds"
    )


def test_a_large_time_a_float_holds_is_read(tmp_path: Path) -> None:
    data = json.loads(SAVED_FIT.read_text())
    data["prefill"][0]["seconds"] = 10**300
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    assert _load("calibrate_gpu").read_measurements(path)["prefill"][0]["seconds"] == 10**300
