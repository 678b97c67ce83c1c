"""`agentgate store` (agentgate/cli/store.py): `store init` makes every table once, and refuses a
file that is not agentgate's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store import SQLiteStore


def test_store_init_creates_every_table_once_and_again_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R18: no command made every table for a least-privilege PostgreSQL role (docs/operations.md
    had a Python snippet); `agentgate store init` does, on SQLite here and PostgreSQL in
    tests/test_docs_formats_second_verifier.py (the page's set-up, run as printed)."""
    url = str(tmp_path / "s.db")
    assert main(["store", "init", "--store", url]) == 0
    first = capsys.readouterr().out.splitlines()
    assert (
        first[0] == "audit log: ready"
        and len(first) == 13
        and all(line.endswith(": ready") for line in first)
    )
    tables = {row[0] for row in SQLiteStore(url).query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "audit_log",
        "audit_refs",
        "agentgate_grants",
        "agentgate_agent_names",
        "budget_ledger",
        "approvals",
        "approval_asked",
    } <= tables
    assert main(["store", "init", "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == first
