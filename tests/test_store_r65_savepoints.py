"""``Transaction.savepoint``: a block whose writes go together inside a larger transaction, on
both stores (review R65: the four savepoints written by hand now go through it)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError, StoreError
from agentgate.store import Store


class _Refused(Exception):
    """What a block raises to be rolled back to its savepoint."""


@pytest.fixture
def table(store: Store) -> Store:
    store.ensure_schema(
        "r65_savepoints",
        {
            "sqlite": "CREATE TABLE IF NOT EXISTS r65_rows (name TEXT PRIMARY KEY)",
            "postgresql": "CREATE TABLE IF NOT EXISTS r65_rows (name TEXT PRIMARY KEY)",
        },
    )
    return store


def _names(store: Store) -> list[str]:
    return [row[0] for row in store.query("SELECT name FROM r65_rows ORDER BY name")]


def test_a_savepoint_that_ends_normally_keeps_its_rows(table: Store) -> None:
    """Review R65: a block that raises nothing is released, and its rows commit with the
    transaction."""
    with table.transaction() as tx:
        tx.execute("INSERT INTO r65_rows (name) VALUES ('before')")
        with tx.savepoint("r65_block"):
            tx.execute("INSERT INTO r65_rows (name) VALUES ('inside')")
        tx.execute("INSERT INTO r65_rows (name) VALUES ('after')")
    assert _names(table) == ["after", "before", "inside"]


def test_an_error_inside_a_savepoint_undoes_only_the_block(table: Store) -> None:
    """Review R65: the block's error passes on unchanged, its rows are undone, the rows written
    before it are kept, and the transaction goes on and commits (a statement after it runs)."""
    with table.transaction() as tx:
        tx.execute("INSERT INTO r65_rows (name) VALUES ('before')")
        with pytest.raises(_Refused, match="refused inside"), tx.savepoint("r65_block"):
            tx.execute("INSERT INTO r65_rows (name) VALUES ('inside')")
            raise _Refused("refused inside")
        tx.execute("INSERT INTO r65_rows (name) VALUES ('after')")
    assert _names(table) == ["after", "before"]


def test_a_failed_statement_inside_a_savepoint_leaves_the_transaction_usable(table: Store) -> None:
    """Review R65: a statement the database refuses (a duplicate key) inside the block is rolled
    back to the savepoint; on PostgreSQL that also clears the aborted state, so the transaction
    runs more statements and commits."""
    with table.transaction() as tx:
        tx.execute("INSERT INTO r65_rows (name) VALUES ('kept')")
        with pytest.raises(table.driver_errors), tx.savepoint("r65_block"):
            tx.execute("INSERT INTO r65_rows (name) VALUES ('undone')")
            tx.execute("INSERT INTO r65_rows (name) VALUES ('kept')")
        tx.execute("INSERT INTO r65_rows (name) VALUES ('later')")
    assert _names(table) == ["kept", "later"]


def test_a_nested_savepoint_rolls_back_alone(table: Store) -> None:
    """Review R65: an error in an inner savepoint caught inside the outer one undoes only the
    inner block; the outer block's rows commit."""
    with table.transaction() as tx, tx.savepoint("r65_outer"):
        tx.execute("INSERT INTO r65_rows (name) VALUES ('outer')")
        with pytest.raises(_Refused), tx.savepoint("r65_inner"):
            tx.execute("INSERT INTO r65_rows (name) VALUES ('inner')")
            raise _Refused
        tx.execute("INSERT INTO r65_rows (name) VALUES ('outer after')")
    assert _names(table) == ["outer", "outer after"]


def test_an_error_in_the_outer_savepoint_undoes_a_released_inner_one(table: Store) -> None:
    """Review R65: an inner savepoint released normally belongs to the outer one: an error in
    the outer block undoes both, and the transaction's other rows commit."""
    with table.transaction() as tx:
        tx.execute("INSERT INTO r65_rows (name) VALUES ('kept')")
        with pytest.raises(_Refused), tx.savepoint("r65_outer"):
            with tx.savepoint("r65_inner"):
                tx.execute("INSERT INTO r65_rows (name) VALUES ('inner')")
            raise _Refused
    assert _names(table) == ["kept"]


@pytest.mark.parametrize("name", ["", "a b", "x; DROP TABLE r65_rows", "1st", "sp-1"])
def test_a_savepoint_name_that_is_not_an_identifier_is_refused(table: Store, name: str) -> None:
    """Review R65: the name is written into the statement, so only a plain SQL identifier is
    taken; anything else is an ``InputError`` before any statement runs."""
    with table.transaction() as tx:
        with pytest.raises(InputError, match="savepoint name"), tx.savepoint(name):
            tx.execute("INSERT INTO r65_rows (name) VALUES ('never')")
        tx.execute("INSERT INTO r65_rows (name) VALUES ('after')")
    assert _names(table) == ["after"]


@pytest.mark.postgres
def test_a_postgresql_transaction_that_met_an_error_it_caught_does_not_say_it_committed(
    postgres_url: str,
) -> None:
    """Review R65: a PostgreSQL transaction whose statement failed is aborted, and the server
    answers its COMMIT with a rollback; psycopg returned normally, so a block that caught the
    driver's error outside a savepoint and went on ended as if its writes were committed, with
    none written. The transaction's end now raises ``StoreError`` saying nothing was written,
    as SQLite's does after an error that ended its transaction."""
    from agentgate.store._postgres import PostgresStore

    store = PostgresStore(postgres_url)
    try:
        store.ensure_schema(
            "r65_savepoints", {"sqlite": "", "postgresql": "CREATE TABLE r65_rows (name TEXT PRIMARY KEY)"}
        )
        with pytest.raises(StoreError, match="nothing was written"), store.transaction() as tx:
            tx.execute("INSERT INTO r65_rows (name) VALUES ('believed written')")
            with pytest.raises(store.driver_errors):
                tx.execute("INSERT INTO r65_rows (name) VALUES ('believed written')")
        assert _names(store) == []
        with store.transaction() as tx:  # the connection is usable again
            tx.execute("INSERT INTO r65_rows (name) VALUES ('written')")
        assert _names(store) == ["written"]
    finally:
        store.close()
