"""``open_existing_store(part_tables=...)`` (``grant check`` and ``delegate``, which scripts run
in loops) passes over the columns of every part's tables when the SQLite file holds all the
tables of the part the command uses. Their names are compared as SQLite compares them, ASCII
letters in either case alike (review R88): before, a store whose tables are named in upper case
(``AGENTGATE_GRANTS``, read as the store it is since R88) never matched, and was read for every
part's schema on each call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened

import agentgate.store._sqlite as sqlite_store
from agentgate.cli._common import open_existing_store
from agentgate.store.grants import GRANTS_DDL

_CREATE_TABLE = re.compile(r"CREATE TABLE (\w+)")


def _upper_cased(path: Path) -> None:
    """The store at ``path`` written again with each table's name in upper case, in WAL mode as
    every store agentgate opened is (so that opening it reads no table: only the command does)."""
    with opened(path) as db:
        statements = list(db.iterdump())
    path.unlink()
    with opened(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        for statement in statements:
            if statement not in ("BEGIN TRANSACTION;", "COMMIT;"):
                db.execute(
                    _CREATE_TABLE.sub(lambda m: f"CREATE TABLE {m.group(1).upper()}", statement, count=1)
                )


@pytest.mark.parametrize("upper", [False, True], ids=["lower-case", "upper-case"])
def test_a_store_holding_the_parts_tables_is_not_read_for_every_parts_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, upper: bool
) -> None:
    path = tmp_path / "s.db"
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 0, err
    if upper:
        _upper_cased(path)

    def every_parts_columns_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the file was read for the columns of every part's tables")

    monkeypatch.setattr(sqlite_store, "foreign_table", every_parts_columns_read)
    store = open_existing_store(str(path), part_tables=sqlite_store.tables_of(GRANTS_DDL["sqlite"]))
    store.close()
