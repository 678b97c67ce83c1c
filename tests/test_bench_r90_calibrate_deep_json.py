"""Review R90: ``calibrate_gpu.py --fit`` of a file of JSON nested a hundred thousand levels deep
ended in a ``RecursionError`` traceback, where ``read_measurements`` promises a message naming
the file for one that is not JSON it can read. It now exits with that message."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_json_nested_too_deeply_is_refused_naming_the_file(opening: str, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(opening * 100_000)
    with pytest.raises(SystemExit) as ended:
        _load("calibrate_gpu").read_measurements(path)
    assert ended.value.code == f"calibrate_gpu: --fit {path}: cannot read it: JSON nested too deeply"
