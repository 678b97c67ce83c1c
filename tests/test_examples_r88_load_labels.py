"""Review R88: ``dispatch.py``'s table showed every load to one decimal, so ``--load 0.84,0.76``
printed 0.8 on both rows (one inside the goals' window of 0.8 to 1.0, one outside). Each row now
shows its load as given, as the JSON keys do."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load


def test_each_row_shows_its_load_as_the_json_keys_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dispatch = _load("dispatch")
    trace = tmp_path / "mooncake_two.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 100, "output_length": 2, "hash_ids": [2]}\n'
    )
    requests = dispatch.load_trace(trace)
    res = dispatch.run_trace(trace, requests, [0.84, 0.76, 0.001], 1, 1, 0.5)
    dispatch.print_table(res)
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.startswith("agentgate ")]
    assert [row[1] for row in rows] == ["0.84", "0.76", "0.001"]
    figures, _ = dispatch.goals([res])
    assert {"mooncake.agentgate.load0.84.ttft_p99", "mooncake.agentgate.load0.76.ttft_p99"} <= set(figures)
    header = next(line for line in out if line.startswith("router"))
    row = next(line for line in out if line.startswith("agentgate "))
    assert header.index("load") + len("load") == row.index("0.84") + len("0.84")  # right-aligned under it
