"""The SQLite store (agentgate/store/_sqlite.py): a file is opened in WAL mode only if it is
agentgate's, and opening or creating a store never drops the locks the process's other
connections hold on the file, nor in a process forked after it was opened."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, _sqlite
from agentgate.store.grants import GrantRepository


def _foreign(path: Path, script: str) -> bytes:
    db = sqlite3.connect(path)
    with db:
        db.executescript(script)
    db.close()
    assert path.read_bytes()[18] == 1  # a rollback journal, as most applications leave it
    return path.read_bytes()


@pytest.mark.parametrize("how", ["api", "store init"])
def test_a_foreign_rollback_mode_file_is_refused_before_it_is_switched_to_wal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    path = tmp_path / "app.db"
    data = _foreign(
        path, "CREATE TABLE audit_log (who TEXT, what TEXT); INSERT INTO audit_log VALUES ('a', 'b');"
    )
    if how == "api":
        with pytest.raises(StoreError, match=r"app\.db: it holds a table audit_log that is not agentgate's"):
            SQLiteStore(path)
    else:
        assert main(["store", "init", "--store", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "audit_log" in err and "not agentgate's" in err
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_rollback_mode_file_of_agentgates_own_tables_opens(tmp_path: Path) -> None:
    # A store copied without its WAL mode (VACUUM INTO keeps the header of a fresh file) is
    # agentgate's all the same and opens, switched to WAL.
    source = tmp_path / "live.db"
    with SQLiteStore(source) as store:
        from agentgate.store.audit import create_audit_tables

        create_audit_tables(store)
    copy = tmp_path / "copy.db"
    db = sqlite3.connect(source)
    db.execute("VACUUM INTO ?", (str(copy),))
    db.close()
    if copy.read_bytes()[18] != 1:
        db = sqlite3.connect(copy)
        db.execute("PRAGMA journal_mode=DELETE")
        db.close()
    assert copy.read_bytes()[18] == 1
    with SQLiteStore(copy) as store:
        assert store.query("PRAGMA journal_mode")[0][0] == "wal"


def test_opening_a_second_store_on_a_file_keeps_the_locks_of_the_first(tmp_path: Path) -> None:
    # The first fix above read the file's header through a file descriptor of its own: closing it
    # dropped every POSIX lock the process held on the file, the shared lock of a Gate's open
    # connections included. Another process's last connection then took the file for its own
    # (it checkpoints and removes the WAL when it thinks no other is open), under the ones still
    # open here: "database disk image is malformed", seen in CI's multi-process audit test. The
    # journal mode is now read through SQLite, which keeps its locks across its connections.
    import subprocess
    import sys

    path = tmp_path / "s.db"
    with SQLiteStore(path) as first:
        with first.transaction() as tx:
            tx.execute("CREATE TABLE t (x)")
        conn = first.connect()
        conn.execute("BEGIN")
        conn.execute("SELECT COUNT(*) FROM t").fetchall()  # a reader, holding its shared lock
        try:
            SQLiteStore(path).close()  # a second store on the file, in this process
            # Leaving WAL mode needs the file to itself: refused while the reader is there.
            probe = (
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None); "
                "print(c.execute('PRAGMA journal_mode=DELETE').fetchone()[0])"
            )
            other = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)
            assert other.returncode != 0 and "locked" in other.stderr, (other.stdout, other.stderr)
        finally:
            conn.execute("ROLLBACK")
            conn.close()


_PROBE = r"""
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
# F_GETLK: would a write lock on the whole file conflict with a lock another process holds?
found = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("locked" if struct.unpack("hhqqi", found)[0] != fcntl.F_UNLCK else "free")
"""


def _locked_by_another_process(path: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "locked"


def test_creating_a_store_file_another_thread_made_keeps_this_processs_sqlite_locks(tmp_path: Path) -> None:
    # Kills: _create without O_EXCL (it opens and closes the file another thread just made, and
    # closing any descriptor of a file drops every POSIX lock the process holds on it: here the
    # shared lock of a live WAL connection, which tells another process's last connection that
    # the file is still in use).
    path = tmp_path / "agentgate.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.execute("SELECT * FROM t").fetchall()
        assert _locked_by_another_process(path)  # the precondition: the connection holds its lock
        status = _sqlite._create(path)  # the file exists: made "meanwhile" by another thread
        assert status.st_ino == os.stat(path).st_ino
        assert _locked_by_another_process(path), "creating the store dropped this process's SQLite lock"
    finally:
        conn.close()


_FORKED: list[Any] = []
"""The store and grant repository a forked child inherits (fork copies them; nothing is pickled)."""


def _decide_in_child(ready: Any, go: Any) -> None:
    store, grants = _FORKED
    ready.set()
    assert go.wait(60)
    for n in range(5):  # the grant repository's own connection
        assert grants.consume_nonce("did:key:zA", f"n{n}", 2**40 - 1, ["g"]) == "fresh"
    with store.transaction() as tx:  # a pooled one
        tx.execute("INSERT INTO forked (k) VALUES (?)", ("child",))


def test_what_a_child_forked_after_the_store_opened_commits_outlives_the_parents_close(
    tmp_path: Path,
) -> None:
    """Review R56: a child used the connections it inherited, whose locks SQLite keeps in the
    process's memory: the child held none of them. Once the parent closed the store (or exited)
    it deleted the write-ahead log as no longer in use, and every later commit of the child, its
    nonces and decisions, went into the deleted file: reported done, and lost."""
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    grants = GrantRepository(store)
    store.query("CREATE TABLE forked (k TEXT PRIMARY KEY)")
    _FORKED[:] = [store, grants]
    context = multiprocessing.get_context("fork")
    ready, go = context.Event(), context.Event()
    child = context.Process(target=_decide_in_child, args=(ready, go))
    child.start()
    try:
        assert ready.wait(60)
        grants.close()
        store.close()  # the parent is done with the store, as when it exits
        go.set()
        child.join(60)
        assert child.exitcode == 0
    finally:
        _FORKED.clear()
    with SQLiteStore(path) as reopened:
        assert reopened.query("SELECT k FROM forked") == [("child",)]
        assert reopened.query("SELECT count(*) FROM agentgate_nonces") == [(5,)]
