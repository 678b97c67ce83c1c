"""Review R90: ``benchmarks/dispatch.py`` on a trace whose requests all have 0 tokens in and 0 out
(``load_trace`` takes such rows) ended in a ``ZeroDivisionError`` traceback from ``capacity_rps``
(the KV memory per request of no tokens). Such a slice has no capacity to set a load by: it is
refused before any replay with one line naming the trace, as one whose arrivals fall at one time."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load


def test_a_trace_of_no_tokens_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "mooncake_empty.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []}\n'
        '{"timestamp": 1000, "input_length": 0, "output_length": 0, "hash_ids": []}\n'
    )
    args = ["--trace", str(trace), "--load", "1.0", "--json", "--plot", str(tmp_path / "p.png")]
    assert _load("dispatch").main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"dispatch: {trace}: its first 2 requests have 0 tokens in and 0 out, so no capacity or "
        "--load can be set from them: replay more of it (--limit)\n"
    )
