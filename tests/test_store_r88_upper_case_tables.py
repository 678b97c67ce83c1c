"""A SQLite store whose tables are named in upper case (``AUDIT_LOG``: SQLite's names are
case-insensitive, so it is the ``audit_log`` agentgate's statements use, accepted at open since
review R87) is read as the store it is everywhere, not only at open (review R88). Before, every
later lookup of a table compared names exactly: a store opened to read only stood empty tables in
for its revocations (a revoked grant read as not revoked), and ``audit verify`` reported an intact
log of 0 entries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.store import ledger, open_store
from agentgate.store._base import tables_held
from agentgate.store.grants import GrantRepository

_CREATE_TABLE = re.compile(r"CREATE TABLE (\w+)")
REVOKED = "ab" * 32


def _upper_cased(path: Path) -> None:
    """The store at ``path`` written again with each table's name in upper case, as another
    program that named them so would have made it: its tables, then their rows, then the
    indexes and triggers as agentgate wrote them (a copy by ``iterdump``)."""
    with opened(path) as db:
        statements = list(db.iterdump())
    path.unlink()
    with opened(path) as db:
        for statement in statements:
            if statement not in ("BEGIN TRANSACTION;", "COMMIT;"):
                db.execute(
                    _CREATE_TABLE.sub(lambda m: f"CREATE TABLE {m.group(1).upper()}", statement, count=1)
                )


@pytest.fixture
def store_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "s.db"
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 0, err
    code, _, err = cli(capsys, "grant", "revoke", REVOKED, "--store", str(path), "--reason", "leaked")
    assert code == 0, err  # recorded in the revocations and, as an entry, in the audit log
    _upper_cased(path)
    assert ("AGENTGATE_REVOCATIONS",) in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")
    return path


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_revocation_in_an_upper_case_table_is_read(store_path: Path, read_only: bool) -> None:
    store = open_store(store_path, create=False, read_only=read_only)
    try:
        repository = GrantRepository(store)
        assert repository.revoked([REVOKED, "cd" * 32]) == {REVOKED}
        repository.close()
    finally:
        store.close()


def test_audit_verify_reads_the_log_in_upper_case_tables(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "audit", "verify", "--store", str(store_path))
    assert code == 0, err
    assert out.startswith("intact: 1 entry,"), out
    code, _, err = cli(capsys, "store", "init", "--store", str(store_path))
    assert code == 0, err
    code, out, err = cli(capsys, "audit", "verify", "--store", str(store_path))
    assert code == 0, err
    assert out.startswith("intact: 1 entry,"), out


def test_table_lookups_compare_names_as_sqlite_does(store_path: Path) -> None:
    """The one lookup the parts share, and the ledger's: a reservation records its ``allow``
    entry's index only where the store holds an audit log."""
    store = open_store(store_path, create=False, read_only=True)
    try:
        held = tables_held(store.query, "sqlite", ["audit_log", "budget_ledger", "no_such_table"])
        ledger_sees = ledger._tables(store)
    finally:
        store.close()
    assert held == {"audit_log", "budget_ledger"}
    assert {"audit_log", "budget_reservations.entry"} <= ledger_sees
