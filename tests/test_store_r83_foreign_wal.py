"""Another application's SQLite database in WAL mode is refused as it is opened, with nothing
written in it (review R83): the open-time check read only files not in WAL mode, taking every
WAL file for agentgate's, so ``store init`` committed the audit, grants, ledger and quota tables
(with their triggers) into the other application's file before the part whose table clashed
refused it. The same file in rollback-journal mode was already refused with nothing written."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.errors import StoreError
from agentgate.store import open_store


def _other_application(path: Path, journal_mode: str) -> bytes:
    """Another application's database at ``path``, with its own ``approvals`` table, closed;
    its bytes."""
    with opened(path) as db:
        db.execute(f"PRAGMA journal_mode={journal_mode}")
        db.execute("CREATE TABLE approvals (ticket TEXT)")
        db.execute("INSERT INTO approvals VALUES ('T-1')")
    return path.read_bytes()


def _left_as_it_was(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no -wal, -shm, -journal
    assert query(path, "SELECT name FROM sqlite_master WHERE type = 'table'") == [("approvals",)]


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_store_init_refuses_another_applications_file_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], journal_mode: str
) -> None:
    path = tmp_path / "app.db"
    before = _other_application(path, journal_mode)
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 2
    assert "cannot open the SQLite store" in err
    assert "it holds a table approvals that is not agentgate's" in err
    _left_as_it_was(path, before)


def test_open_store_refuses_a_wal_file_of_another_application_before_any_part(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    before = _other_application(path, "wal")
    with pytest.raises(StoreError, match=r"cannot open the SQLite store .*approvals that is not agentgate's"):
        open_store(path)
    _left_as_it_was(path, before)


def test_a_wal_file_the_other_application_holds_open_is_refused_and_stays_its_own(tmp_path: Path) -> None:
    """The other application is running: its last commit is still in its ``-wal``. The refusal
    takes nothing from it, and the application goes on reading and writing its file."""
    path = tmp_path / "app.db"
    _other_application(path, "wal")
    with contextlib.closing(sqlite3.connect(path)) as running:
        running.execute("INSERT INTO approvals VALUES ('T-2')")
        running.commit()
        with pytest.raises(StoreError, match="approvals that is not agentgate's"):
            open_store(path)
        running.execute("INSERT INTO approvals VALUES ('T-3')")
        running.commit()
        tables = running.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        assert tables == [("approvals",)]
        assert running.execute("SELECT ticket FROM approvals ORDER BY ticket").fetchall() == [
            ("T-1",),
            ("T-2",),
            ("T-3",),
        ]


def test_agentgates_own_wal_store_still_opens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ag.db"
    assert cli(capsys, "store", "init", "--store", str(path))[0] == 0
    assert query(path, "PRAGMA journal_mode") == [("wal",)]
    assert cli(capsys, "store", "init", "--store", str(path))[0] == 0
    open_store(path).close()


@pytest.mark.parametrize("existing", [False, True], ids=["new", "agentgate's"])
def test_opening_a_new_or_an_agentgate_store_imports_no_part(tmp_path: Path, existing: bool) -> None:
    """The check reads no part's tables where it has nothing to refuse: a new file (no table)
    and agentgate's own store in WAL mode (its version record). Reading them imports every
    part, the audit log's Pydantic models with them: R83's first version of the check did, on
    every open (the grant verbs' start-up checks caught the second, a second reading the first)."""
    path = tmp_path / "agentgate.db"
    if existing:
        open_store(path).close()
    code = (
        "import sys; from agentgate.store import open_store; "
        f"open_store({str(path)!r}).close(); "
        "print(sorted(m for m in ('agentgate.store.audit', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done
