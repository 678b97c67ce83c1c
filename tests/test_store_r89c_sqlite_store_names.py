"""A regression review of R89: ``SQLiteStore(path)`` refuses what ``open_store`` refuses.

Review R89 refused a SQLite path naming a directory (``state/``) or another database's
``-wal``, ``-shm`` or ``-journal`` (``st/a.db-wal`` beside ``st/a.db``) in ``open_store`` only.
``SQLiteStore`` is public, and the examples build a gate on it (``Gate(policy,
SQLiteStore(store))``): it still made a file ``state``, or a store at ``st/a.db-wal`` that SQLite
deleted, with what was written there, at the next write of ``st/a.db``. It now refuses both
itself, nothing made.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, open_store


@pytest.fixture
def beside_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory ``tmp_path``, holding the idle store ``st/a.db`` (no ``-wal``)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "st").mkdir()
    open_store("st/a.db").close()
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["a.db"]
    return tmp_path


@pytest.mark.parametrize("end", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_a_store_made_in_code_at_a_databases_sidecar_is_refused(
    beside_a_store: Path, end: str, as_path: bool
) -> None:
    name = f"st/a.db{end}"
    with pytest.raises(StoreError, match=f"path {name} is where SQLite keeps the .* database st/a.db,"):
        SQLiteStore(Path(name) if as_path else name)
    assert sorted(p.name for p in (beside_a_store / "st").iterdir()) == ["a.db"]


@pytest.mark.parametrize("name", ["state/", "state/.", "."])
def test_a_store_made_in_code_at_a_directorys_name_is_refused(beside_a_store: Path, name: str) -> None:
    with pytest.raises(StoreError, match="that names a directory"):
        SQLiteStore(name)
    assert sorted(p.name for p in beside_a_store.iterdir()) == ["st"]


def test_the_database_and_a_name_of_its_own_beside_it_are_stores(beside_a_store: Path) -> None:
    for name in ("st/a.db", "st/b.db", Path("st/c.db")):
        store = SQLiteStore(name)
        with store.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS t (x)")
        store.close()
    assert sqlite3.connect("st/b.db").execute("SELECT count(*) FROM t").fetchone() == (0,)
