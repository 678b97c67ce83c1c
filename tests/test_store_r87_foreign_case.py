"""Another application's SQLite file whose table has one of agentgate's names in other letter
case (``AUDIT_LOG``: SQLite's names are case-insensitive, so it is the ``audit_log`` agentgate's
statements would use) is refused as it is opened, with nothing written in it (review R87). Until
then the names were compared case-sensitively: the file passed the open-time check, its first
connection switched it to WAL mode (a change to its header, a ``-wal`` and ``-shm`` beside it),
and only the audit part refused it, after the parts before it (in WAL mode) had their tables
committed into it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.errors import StoreError
from agentgate.store import open_store


def _other_application(path: object, journal_mode: str, table: str) -> None:
    with opened(path) as db:
        db.execute(f"PRAGMA journal_mode={journal_mode}")
        db.execute(f"CREATE TABLE {table} (ts TEXT, msg TEXT)")
        db.execute(f"INSERT INTO {table} VALUES ('t', 'm')")


CASES = pytest.mark.parametrize(
    ("journal_mode", "table"),
    [("delete", "AUDIT_LOG"), ("delete", "Approvals"), ("wal", "Audit_Log"), ("wal", "BUDGET_LEDGER")],
)


@CASES
def test_store_init_refuses_a_table_of_agentgates_name_in_other_case_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], journal_mode: str, table: str
) -> None:
    path = tmp_path / "app.db"
    _other_application(path, journal_mode, table)
    before = path.read_bytes()
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 2, err
    assert f"cannot open the SQLite store {path}: it holds a table {table} that is not agentgate's" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no -wal, -shm, -journal
    assert query(path, "SELECT name FROM sqlite_master WHERE type = 'table'") == [(table,)]


@CASES
@pytest.mark.parametrize("create", [True, False], ids=["create", "must-exist"])
def test_open_store_refuses_a_table_of_agentgates_name_in_other_case_before_writing(
    tmp_path: Path, journal_mode: str, table: str, create: bool
) -> None:
    """As a file holding ``audit_log`` is refused: a store that must exist (``create=False``)
    too, which was refused before as well, as a file of another application's tables only."""
    path = tmp_path / "app.db"
    _other_application(path, journal_mode, table)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"it holds a table {table} that is not agentgate's"):
        open_store(path, create=create)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
