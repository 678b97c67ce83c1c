"""A SQLite store path that begins with ``//`` (a valid POSIX path: on Linux the same file as
the one with a single slash) works for the verbs that only read and for the check of another
application's file (review R83). ``read_only_uri`` built ``file:`` + the path, and
``os.path.abspath`` keeps a leading ``//``: the URI became ``file://tmp/...``, whose ``tmp``
SQLite reads as an authority ("invalid uri authority: tmp"). Every read-only verb failed on a
store the writing verbs opened fine, and the check made before the first connection switches a
file to WAL mode read nothing, so another application's database was switched, then refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.store._sqlite import read_only_uri, sqlite_tables_read_only


def _double_slashed(path: Path) -> str:
    assert path.is_absolute()
    return "/" + str(path)  # //tmp/...: the same file


def test_read_only_uri_of_a_double_slashed_path_opens_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    with opened(path) as db:
        db.execute("CREATE TABLE t (x TEXT)")
    uri, immutable = read_only_uri(_double_slashed(path))
    assert immutable  # no -wal or -journal beside it
    for each in (uri, uri.removesuffix("&immutable=1")):  # and as a file a writer has open
        conn = sqlite3.connect(each, uri=True)
        try:
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
        finally:
            conn.close()
    assert sqlite_tables_read_only(_double_slashed(path)) == [("t", frozenset({"x"}))]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.db"]


def test_the_verbs_that_only_read_open_a_double_slashed_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _double_slashed(tmp_path / "ag.db")
    assert cli(capsys, "store", "init", "--store", store)[0] == 0
    code, out, err = cli(capsys, "approval", "list", "--store", store)
    assert (code, err) == (0, "")
    assert "no open approval requests" in out
    code, out, err = cli(capsys, "audit", "verify", "--store", store)
    assert (code, err) == (0, ""), err
    assert "invalid uri authority" not in out


def test_a_double_slashed_store_with_a_writer_open_is_read_through_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a ``-wal`` beside it (a writer has it open), the file is read ``mode=ro``, not
    ``immutable``, and what the log holds is read."""
    assert cli(capsys, "store", "init", "--store", str(tmp_path / "ag.db"))[0] == 0
    writer = open_store(tmp_path / "ag.db")
    try:
        writer.query("CREATE TABLE held (x TEXT)")
        writer.query("INSERT INTO held VALUES ('in the log')")
        assert (tmp_path / "ag.db-wal").exists()
        reader = open_store(_double_slashed(tmp_path / "ag.db"), create=False, read_only=True)
        try:
            assert reader.query("SELECT x FROM held") == [("in the log",)]
        finally:
            reader.close()
    finally:
        writer.close()


def test_another_applications_file_named_with_a_double_slash_is_refused_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.db"
    with opened(path) as db:
        db.execute("CREATE TABLE audit_log (x TEXT)")
    before = path.read_bytes()
    code, _, err = cli(capsys, "store", "init", "--store", _double_slashed(path))
    assert code == 2
    assert "cannot open the SQLite store" in err and "audit_log that is not agentgate's" in err
    assert path.read_bytes() == before
    assert query(path, "PRAGMA journal_mode") == [("delete",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]
    with pytest.raises(StoreError, match=r"cannot open the SQLite store .*audit_log that is not agentgate's"):
        open_store(_double_slashed(path))
    assert path.read_bytes() == before
