"""A SQLite store a newer agentgate wrote, not in WAL mode (copied without its mode, or set back by
hand), is refused as a writer opens it with nothing changed in the file (review R95): its
version row was read only through the first writable connection, which had already switched the
file to WAL mode (its header rewritten, a ``-wal`` and a ``-shm`` left beside it), and the
refusal still said "nothing was written". A row edited to hold no version is refused the same
way. Readers and stores in WAL mode were already left as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.cli.main import main
from agentgate.errors import MalformedRow, NewerStore
from agentgate.store import open_store
from agentgate.store._version import SCHEMA_VERSION


def _rolled_back_store(path: Path, version: object) -> bytes:
    """An agentgate store at ``path`` whose version row holds ``version``, in rollback-journal
    mode, closed; its bytes."""
    assert main(["store", "init", "--store", str(path)]) == 0
    with opened(path) as db:
        db.execute("UPDATE agentgate_schema SET version = ?, newest = ?", (version, version))
    with opened(path, isolation_level=None) as db:
        db.execute("PRAGMA journal_mode=DELETE")
    return path.read_bytes()


def _left_as_it_was(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no -wal, -shm, -journal
    assert query(path, "PRAGMA journal_mode") == [("delete",)]


def test_store_init_refuses_a_newer_store_changing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    before = _rolled_back_store(path, SCHEMA_VERSION + 1)
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 2
    assert "was written by a newer agentgate" in err
    assert "nothing was written" in err
    _left_as_it_was(path, before)


@pytest.mark.parametrize(
    ("version", "error"),
    [(SCHEMA_VERSION + 1, NewerStore), ("four", MalformedRow)],
    ids=["newer", "malformed"],
)
def test_a_writable_open_refuses_the_version_row_before_the_switch_to_wal(
    tmp_path: Path, version: object, error: type[Exception]
) -> None:
    path = tmp_path / "s.db"
    before = _rolled_back_store(path, version)
    with pytest.raises(error):
        open_store(path)
    _left_as_it_was(path, before)


def test_an_agentgate_store_in_rollback_journal_mode_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _rolled_back_store(path, SCHEMA_VERSION)
    with open_store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
    assert query(path, "PRAGMA journal_mode") == [("wal",)]


@pytest.mark.parametrize("journal", ["DELETE", "WAL"])
def test_a_newer_store_whose_table_changed_layout_is_refused_as_newer_in_either_mode(
    tmp_path: Path, journal: str
) -> None:
    """R95's regression review: a newer agentgate's table of another layout (a column renamed) in
    a file not in WAL mode was refused as another application's table; in WAL mode as a newer
    store. Both now say the newer store, and leave the file as it was."""
    path = tmp_path / "s.db"
    _rolled_back_store(path, SCHEMA_VERSION + 1)
    with opened(path) as db:
        db.execute("ALTER TABLE approval_grants RENAME COLUMN grant_id TO grant_ref")
    with opened(path, isolation_level=None) as db:
        db.execute(f"PRAGMA journal_mode={journal}")
    before = path.read_bytes()
    with pytest.raises(NewerStore, match="was written by a newer agentgate"):
        open_store(path)
    assert path.read_bytes() == before
    assert query(path, "PRAGMA journal_mode") == [(journal.lower(),)]
