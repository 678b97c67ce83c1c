"""A transaction that a KeyboardInterrupt (any BaseException) stops before its COMMIT or ROLLBACK
ran leaves nothing written and no transaction open on a pooled connection (review R92): until
then the connection went back to the pool inside its transaction, holding the write lock, and
every later transaction that took it failed with "cannot start a transaction within a
transaction"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentgate.store import SQLiteStore, _sqlite


def _store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "agentgate.db")
    with store.transaction() as tx:
        tx.execute("CREATE TABLE t (x INTEGER)")
    return store


def _interrupt_once(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
    real = getattr(owner, name)

    def interrupted(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(owner, name, real)
        raise KeyboardInterrupt

    monkeypatch.setattr(owner, name, interrupted)


def _after_the_interrupt_only_later_writes_are_kept(store: SQLiteStore) -> None:
    with store.transaction() as tx:
        tx.execute("INSERT INTO t (x) VALUES (2)")
    with store.transaction() as tx:
        assert tx.execute("SELECT x FROM t") == [(2,)]
    assert all(not conn.in_transaction for conn in store._idle)


def _insert(tx: Any) -> None:
    tx.execute("INSERT INTO t (x) VALUES (1)")


def _insert_then_interrupt(tx: Any) -> None:
    tx.execute("INSERT INTO t (x) VALUES (1)")
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("owner", "name", "block"),
    [
        # an interrupt between the block and the commit writes nothing
        pytest.param(lambda store: store, "check_in_place", _insert, id="between-block-and-commit"),
        pytest.param(lambda store: _sqlite, "_SQLiteTransaction", lambda tx: None, id="right-after-begin"),
        # a second interrupt during the rollback writes nothing
        pytest.param(
            lambda store: SQLiteStore, "_rollback", _insert_then_interrupt, id="second-during-rollback"
        ),
    ],
)
def test_an_interrupt_in_a_transaction_writes_nothing_and_leaves_the_store_usable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    owner: Callable[[SQLiteStore], object],
    name: str,
    block: Callable[[Any], None],
) -> None:
    store = _store(tmp_path)
    _interrupt_once(monkeypatch, owner(store), name)
    with pytest.raises(KeyboardInterrupt), store.transaction() as tx:
        block(tx)
    _after_the_interrupt_only_later_writes_are_kept(store)
    store.close()


def test_an_interrupt_while_a_part_makes_its_tables_leaves_none_and_the_store_usable(tmp_path: Path) -> None:
    store = _store(tmp_path)
    ddl = {"sqlite": "CREATE TABLE made (y INTEGER);", "postgres": "CREATE TABLE made (y INTEGER);"}

    def interrupted(tx: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.ensure_schema("made", ddl, made=interrupted)  # type: ignore[arg-type]
    with store.transaction() as tx:
        assert tx.execute("SELECT name FROM sqlite_master WHERE name = 'made'") == []
    _after_the_interrupt_only_later_writes_are_kept(store)
    store.close()
