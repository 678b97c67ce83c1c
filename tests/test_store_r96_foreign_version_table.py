"""Review R96: another application's SQLite file (rollback journal, not WAL) with a table named
agentgate_schema was read for agentgate's version row before its tables were checked. Without a
``version`` column that read failed, which skipped the refusal of a foreign file: the first
writable connection switched the file to WAL, and the store failed with "no such column:
version". With agentgate's columns but a version that is not a number, beside another
application's ``audit_log``, the error blamed the version row instead of the foreign table. Both
are now refused as another application's file, the file left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from _raw_sqlite import opened, query

from agentgate.errors import MalformedRow, StoreError
from agentgate.store import SQLiteStore


def _foreign_file(path: Path, script: str) -> bytes:
    with opened(path) as db:
        db.executescript(script)
    return path.read_bytes()


def _refused_untouched(path: Path, before: bytes, table: str) -> None:
    with pytest.raises(StoreError) as refused:
        SQLiteStore(path)
    assert not isinstance(refused.value, MalformedRow)
    assert f"holds a table {table} that is not agentgate's" in str(refused.value)
    assert path.read_bytes() == before
    assert query(path, "PRAGMA journal_mode") == [("delete",)]


def test_a_foreign_version_table_without_agentgates_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    before = _foreign_file(
        path, "CREATE TABLE agentgate_schema (name TEXT); INSERT INTO agentgate_schema VALUES ('x');"
    )
    _refused_untouched(path, before, "agentgate_schema")


def test_a_malformed_version_beside_a_foreign_table_names_the_foreign_table(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    before = _foreign_file(
        path,
        "CREATE TABLE agentgate_schema (id INTEGER, version TEXT);"
        "INSERT INTO agentgate_schema VALUES (1, 'abc'); CREATE TABLE audit_log (foo TEXT);",
    )
    _refused_untouched(path, before, "audit_log")
