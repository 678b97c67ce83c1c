"""Review R85: ``calibrate_gpu.py --fit`` took a whole number too large for a float in a point
(``10**400`` sequences) and ended in an OverflowError traceback in the fit, where
``read_measurements`` promises a message naming the file. A point's sequences and tokens are now
whole numbers from 0 to 2**30, checked as the file is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import SAVED_FIT, _load


def _saved_with(tmp_path: Path, kind: str, field: str, value: int) -> Path:
    data = json.loads(SAVED_FIT.read_text())
    data[kind][0][field] = value
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [("decode", "batch", 10**400), ("decode", "context", 2**30 + 1), ("prefill", "cached", 10**300)],
    ids=["10**400 sequences", "2**30+1 tokens", "10**300 cached tokens"],
)
def test_a_count_past_2_to_the_30_is_refused_naming_the_file(
    kind: str, field: str, value: int, tmp_path: Path
) -> None:
    path = _saved_with(tmp_path, kind, field, value)
    with pytest.raises(SystemExit) as ended:
        _load("calibrate_gpu").read_measurements(path)
    fields = " and ".join(_load("calibrate_gpu").POINT_FIELDS[kind])
    assert ended.value.code == (
        f"calibrate_gpu: --fit {path}: {kind} point 0 needs whole numbers {fields} from 0 to 2**30 "
        "and a positive number of seconds"
    )


def test_a_count_of_2_to_the_30_is_read(tmp_path: Path) -> None:
    path = _saved_with(tmp_path, "prefill", "cached", 2**30)
    assert _load("calibrate_gpu").read_measurements(path)["prefill"][0]["cached"] == 2**30
