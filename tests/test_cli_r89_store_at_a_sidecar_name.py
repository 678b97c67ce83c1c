"""Review R89: a SQLite store path that names where SQLite keeps another database's write-ahead
log (``--store st/a.db-wal`` beside the store ``st/a.db``, tab completion's slip) was accepted:
``store init`` made a store there and ``grant revoke`` said ``revoked``, exit 0, and the next
command that wrote ``st/a.db`` had SQLite take that file for its log and delete it, the
revocation with it. Such a path (``-wal``, ``-shm`` or ``-journal`` beside a database) is now
refused by every verb and by ``open_store`` (exit 2, one line naming it), nothing made."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import StoreError
from agentgate.store import open_store

_ID = "ee" * 32


@pytest.fixture
def beside_a_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The working directory ``tmp_path``, holding the store ``st/a.db`` (idle: no ``-wal``)."""
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "store", "init", "--store", "st/a.db")[0] == 0
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["a.db"]
    return tmp_path / "st"


@pytest.mark.parametrize("end", ["-wal", "-shm", "-journal"])
def test_no_verb_takes_a_databases_sidecar_for_a_store(
    end: str, beside_a_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"st/a.db{end}"
    for argv in (["store", "init"], ["grant", "revoke", _ID], ["approval", "list"]):
        code, out, err = cli(capsys, *argv, "--store", name)
        assert code == 2 and out == "", (argv, code, out, err)
        assert err.count("\n") == 1 and f"store path {name} is where SQLite keeps the" in err, err
        assert "of the database st/a.db," in err, err
    assert sorted(p.name for p in beside_a_store.iterdir()) == ["a.db"]
    with pytest.raises(StoreError, match="is where SQLite keeps the"):
        open_store(name)


def test_a_link_to_the_sidecar_is_refused_too(beside_a_store: Path) -> None:
    (beside_a_store.parent / "mine.db").symlink_to(beside_a_store / "a.db-wal")
    with pytest.raises(StoreError, match="is where SQLite keeps the write-ahead log"):
        open_store("mine.db")
    assert sorted(p.name for p in beside_a_store.iterdir()) == ["a.db"]


def test_such_a_name_beside_no_database_is_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("notes").write_text("not a database\n", encoding="utf-8")
    Path("dir").mkdir()
    for name in ("alone.db-wal", "notes-journal", "dir-shm"):  # "notes": 15 bytes, no database
        open_store(name).close()
        assert Path(name).is_file()


def test_a_file_holding_a_write_ahead_log_is_refused_whatever_its_name_and_left_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    conn = sqlite3.connect("d.db")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        shutil.copy("d.db-wal", "saved.db")
    finally:
        conn.close()
    before = Path("saved.db").read_bytes()
    for argv in (["store", "init"], ["approval", "list"]):
        code, out, err = cli(capsys, *argv, "--store", "saved.db")
        assert code == 2 and out == "", (code, out, err)
        assert err.count("\n") == 1 and "saved.db" in err and "not a database" in err, err
    assert Path("saved.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.db", "saved.db"]
