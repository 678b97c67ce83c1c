"""The floor variants of benchmarks/langgraph_overhead.py record what they claim: one hashed entry
per call of the run, written before the call runs, at the durability they are named for. Their
ratios are reported as what any middleware that records each call in an embedded database costs
at least on the machine; a floor that skipped calls, or wrote after them, would flatter that."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_benchmarks_contract import _load

pytest.importorskip("langchain")
BENCH = _load("langgraph_overhead")


def test_each_call_is_recorded_before_its_handler_runs(tmp_path: Path) -> None:
    floor = BENCH.RecordOnly(tmp_path / "floor.db", "NORMAL")
    try:
        seen: list[int] = []

        def handler(_: Any) -> str:
            seen.append(floor.rows())
            return "ran"

        assert floor.wrap_tool_call(SimpleNamespace(tool_call={"name": "lookup"}), handler) == "ran"
        assert floor.wrap_model_call(SimpleNamespace(), handler) == "ran"
        assert seen == [1, 2]
    finally:
        floor.close()


@pytest.mark.parametrize(
    ("synchronous", "level", "checkpoint"), [("FULL", 2, BENCH.DURABLE_WAL_PAGES), ("NORMAL", 1, 1000)]
)
def test_a_whole_run_records_every_tool_delegation_and_model_call(
    tmp_path: Path, synchronous: str, level: int, checkpoint: int
) -> None:
    floor = BENCH.RecordOnly(tmp_path / "floor.db", synchronous)
    try:
        assert floor.db.execute("PRAGMA synchronous").fetchone()[0] == level
        assert floor.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert floor.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == checkpoint  # as SQLiteStore
        lookups = BENCH.LOOKUPS[0]
        BENCH._check(BENCH.build_plain(floor)(), f"floor {synchronous}")
        assert BENCH.LOOKUPS[0] - lookups == BENCH.TOOL_CALLS
        rows = floor.db.execute("SELECT entry, leaf FROM entries ORDER BY idx").fetchall()
    finally:
        floor.close()
    resources = [json.loads(entry)["resource"] for entry, _ in rows]
    assert resources.count("tool:lookup") == BENCH.TOOL_CALLS
    assert sorted(r for r in resources if r.startswith("tool:ask_")) == [
        f"tool:ask_{name}" for name in BENCH.SUBAGENTS
    ]
    assert resources.count("model:scripted") == BENCH.MODEL_CALLS
    assert len(rows) == BENCH.TOOL_CALLS + len(BENCH.SUBAGENTS) + BENCH.MODEL_CALLS
    assert all(leaf == hashlib.sha256(b"\0" + entry).digest() for entry, leaf in rows)
