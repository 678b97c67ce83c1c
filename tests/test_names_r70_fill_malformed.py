"""The fill-in of ``agentgate_agent_names`` passes over a grant entry it cannot read, whatever is
wrong in it (review R70, a second reading of ``store.agent_names.granted_before``)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.cli.main import main
from agentgate.store import open_store


def _init(path: Path) -> int:
    with redirect_stdout(io.StringIO()):
        return main(["store", "init", "--store", str(path)])


@pytest.mark.parametrize("reasons", [{"issued grant ": 1}, 7, True])
def test_an_entry_whose_reasons_are_no_list_is_passed_over(tmp_path: Path, reasons: object) -> None:
    """Review R70: ``_grant_named`` checked ``reasons[0]`` outside the ``try`` that passes over an
    entry it cannot read, so an ``allow`` entry on ``agent:NAME`` whose ``reasons`` is an object
    or a number (bytes edited in the database: ``audit verify`` reports them) stopped the upgrade
    with a bare ``KeyError``/``TypeError`` (``store init`` and a Gate's first grant alike),
    where its docstring promises such an entry is passed over."""
    path = tmp_path / "agentgate.db"
    assert _init(path) == 0
    entry = {
        "kind": "allow",
        "resource": "agent:helper",
        "reasons": reasons,
        "time": "2026-12-01T00:00:00.000000Z",
    }
    with opened(path) as conn:
        conn.execute("DROP TABLE agentgate_agent_names")
        conn.execute(
            "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (0, ?, ?)",
            (json.dumps(entry, sort_keys=True, separators=(",", ":")).encode(), b"\0" * 32),
        )
    assert _init(path) == 0
    store = open_store(str(path))
    try:
        assert store.query("SELECT reading, name FROM agentgate_agent_names") == []
    finally:
        store.close()
