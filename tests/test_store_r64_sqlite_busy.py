"""A SQLite store whose write lock another process holds (``BEGIN IMMEDIATE``, a long
transaction, a backup tool) makes a verb that writes wait for SQLite's busy timeout, which
``AGENTGATE_SQLITE_BUSY_TIMEOUT`` (seconds, default 30) sets, then fail with one line that says
the store is busy, locked by another process, names its path and the wait, and that nothing
was written: the same line whatever the verb and wherever the lock is met (opening a part's
tables, starting a transaction, a statement, the commit). Until review R64 the wait was fixed at
30 s, and the line depended on where it was met: ``budget settle`` said ``cannot create the audit
tables in PATH: database is locked`` of a store whose tables exist, ``grant revoke`` and ``store
prune`` the same of the grants tables, and a statement ``SQLite error on PATH: database is
locked``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import InputError, StoreError
from agentgate.store import SQLiteStore
from agentgate.store.grants import GrantRepository

GRANT = "ab" * 32
RESERVATION = "0123456789abcdef" * 2


@contextmanager
def held_write_lock(path: Path) -> Iterator[None]:
    """Another connection holding the store's write lock until the block ends."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A store with every part's tables and a log key, and a short busy timeout set as a user
    sets it."""
    path = tmp_path / "agentgate.db"
    assert main(["store", "init", "--store", str(path)]) == 0
    assert main(["audit", "checkpoint", "--store", str(path)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("AGENTGATE_SQLITE_BUSY_TIMEOUT", "0.2")
    return path


@pytest.mark.parametrize(
    "verb",
    [
        ["budget", "settle", RESERVATION, "--ran"],
        ["store", "prune", "--older-than", "30d"],
        ["grant", "revoke", GRANT],
        ["store", "init"],
    ],
    ids=["budget-settle", "store-prune", "grant-revoke", "store-init"],
)
def test_a_verb_on_a_locked_store_says_it_is_busy(
    made: Path, capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    """Review R64: each verb that writes, on a store another connection holds the write lock of,
    exits 2 with one line: busy, locked by another process, the path, the timeout and its
    variable; never that tables cannot be created."""
    with held_write_lock(made):
        code = main([*verb, "--store", str(made)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.count("\n") == 1, err
    assert "cannot create" not in err, err
    assert f"the SQLite store {made} is busy" in err, err
    assert "locked by another process" in err and "AGENTGATE_SQLITE_BUSY_TIMEOUT" in err, err
    assert "0.2 s" in err, err


def test_a_statement_meeting_the_lock_says_the_same(made: Path) -> None:
    """Review R64: the lock met by a transaction's start on a store already open (not while
    opening a part) is the same StoreError."""
    store = SQLiteStore(made)
    try:
        with held_write_lock(made), pytest.raises(StoreError) as caught, store.transaction() as tx:
            tx.execute("DELETE FROM agentgate_dead_letters")
    finally:
        store.close()
    assert f"the SQLite store {made} is busy" in str(caught.value)
    assert "nothing was written" in str(caught.value)


def test_the_verbs_that_read_are_not_held_up(made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R64: a writer's lock does not stop a verb that only reads (WAL mode)."""
    with held_write_lock(made):
        assert main(["budget", "held", "--store", str(made)]) == 0
    assert capsys.readouterr().out == "no held reservations\n"


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "1e9"])
def test_a_busy_timeout_that_is_no_number_of_seconds_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Review R64: AGENTGATE_SQLITE_BUSY_TIMEOUT that is not a number of seconds from 0 to a day
    is refused, naming it, before the store is opened."""
    monkeypatch.setenv("AGENTGATE_SQLITE_BUSY_TIMEOUT", value)
    with pytest.raises(InputError, match="AGENTGATE_SQLITE_BUSY_TIMEOUT"):
        SQLiteStore(tmp_path / "agentgate.db")
    assert not (tmp_path / "agentgate.db").exists()


def test_a_nonce_recorded_outside_a_transaction_says_the_store_is_busy(made: Path) -> None:
    """Review R64: ``GrantRepository.consume_nonce`` outside a bound transaction writes on its
    own connection to SQLite (``Authority.decide`` without a Gate); meeting the write lock there,
    it said ``cannot record the invocation nonce: database is locked``: now the store's one line."""
    store = SQLiteStore(made)
    repo = GrantRepository(store)
    try:
        with held_write_lock(made), pytest.raises(StoreError) as refused:
            repo.consume_nonce("did:key:zA", "n-1", 2**40, [GRANT])
    finally:
        repo.close()
        store.close()
    said = str(refused.value)
    assert f"the SQLite store {made} is busy" in said and "AGENTGATE_SQLITE_BUSY_TIMEOUT" in said, said
