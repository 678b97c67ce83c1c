"""``open_store(create=False)``: a store that must already exist (agentgate/store/_existing.py).

Until review R54 only the CLI refused a store that does not exist (``open_existing_store``); the
library could not: ``open_store("/var/lib/agentgte.db")`` (a typo), ``Gate.open(policy,
store=...)`` and a service embedding the gateway each quietly created a new, empty store, whose
empty revocation list let a revoked chain through and whose budgets started at nothing spent.
Rules checked here, for SQLite and PostgreSQL: with ``create=False`` a missing SQLite file, an
empty file, another application's SQLite database and a PostgreSQL database without agentgate's
tables are ``NoStore`` (a ``StoreError``) naming the store (no password) and saying how to set
one up, and nothing is created (no file, no directory, no table); a store that exists opens; and
``create=True`` stays the default.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from agentgate import Gate
from agentgate.errors import InputError, NoStore, StoreError
from agentgate.store import open_store
from agentgate.store._existing import STORE_TABLES
from agentgate.store.grants import GrantRepository

POLICY = Path(__file__).resolve().parent.parent / "policies" / "support.yaml"


def _tables(url: str) -> set[str]:
    """agentgate's tables in the PostgreSQL database at ``url``, read without agentgate."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_catalog.pg_class WHERE relkind IN ('r', 'p') AND relname = ANY(%s)",
            (list(STORE_TABLES),),
        ).fetchall()
    return {str(row[0]) for row in rows}


# --- SQLite ----------------------------------------------------------------------------------------


def test_a_missing_sqlite_file_is_no_store_and_nothing_is_created(tmp_path: Path) -> None:
    """Review R54: open_store(create=False) on a mistyped path created a new, empty store there."""
    typo = tmp_path / "lib" / "agentgte.db"
    with pytest.raises(NoStore) as refused:
        open_store(typo, create=False)
    message = str(refused.value)
    assert refused.value.reason == "missing" and isinstance(refused.value, StoreError)
    assert f"no store at {typo}" in message and f"agentgate store init --store {typo}" in message
    assert os.listdir(tmp_path) == []  # no file, no directory


def test_a_sqlite_url_to_a_missing_file_is_no_store(tmp_path: Path) -> None:
    """Review R54: a sqlite:/// URL to a missing file is refused as a path is, nothing created."""
    with pytest.raises(NoStore, match="no store at"):
        open_store(f"sqlite:///{tmp_path}/x.db", create=False)
    assert os.listdir(tmp_path) == []


def test_a_link_to_no_file_is_no_store_and_nothing_is_made_through_it(tmp_path: Path) -> None:
    """Review R54: a symbolic link to a missing file got a new store made through it."""
    link = tmp_path / "agentgate.db"
    link.symlink_to(tmp_path / "gone" / "real.db")
    with pytest.raises(NoStore, match="no such file"):
        open_store(link, create=False)
    assert os.listdir(tmp_path) == ["agentgate.db"] and not link.exists()


def test_an_empty_file_is_no_store_and_stays_empty(tmp_path: Path) -> None:
    """Review R54: open_store(create=False) on an empty (0-byte) file made it a new, empty store."""
    empty = tmp_path / "agentgate.db"
    empty.touch()
    with pytest.raises(NoStore, match="the file is empty") as refused:
        open_store(empty, create=False)
    assert refused.value.reason == "empty" and "agentgate store init --store" in str(refused.value)
    assert os.listdir(tmp_path) == ["agentgate.db"] and empty.stat().st_size == 0


def test_another_applications_sqlite_file_is_no_store_and_is_left_as_it_was(tmp_path: Path) -> None:
    """Review R54: open_store(create=False) on another application's SQLite file opened it as a store."""
    other = tmp_path / "places.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        db.commit()
    before = other.read_bytes()
    with pytest.raises(
        NoStore, match=r"another application's SQLite database \(tables moz_places\)"
    ) as refused:
        open_store(other, create=False)
    assert refused.value.reason == "foreign" and refused.value.tables == ("moz_places",)
    assert "agentgate store init --store" in str(refused.value)
    assert other.read_bytes() == before and os.listdir(tmp_path) == ["places.sqlite"]  # no WAL mode, no -wal


def test_an_existing_sqlite_store_opens_and_the_default_still_creates(tmp_path: Path) -> None:
    """Review R54: create=False opens a store that exists (one never used too); create=True stays the default."""
    path = tmp_path / "new" / "agentgate.db"
    with open_store(path) as created:  # the default: a new store, directory and all
        GrantRepository(created).close()
    with open_store(path, create=False) as existing:
        assert existing.dialect == "sqlite"
        GrantRepository(existing).close()
    unused = tmp_path / "unused.db"
    open_store(unused).close()  # opened, never used: no table, but agentgate's file
    open_store(unused, create=False).close()


def test_create_must_be_a_bool(tmp_path: Path) -> None:
    """Review R54: create="no" (a truthy string) must not be read as create=True."""
    with pytest.raises(InputError, match="create must be True or False"):
        open_store(tmp_path / "x.db", create="no")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_gate_open_with_create_store_false_refuses_a_missing_store(tmp_path: Path) -> None:
    """Review R54: Gate.open(policy, store=typo) made a new, empty store; create_store=False refuses it."""
    typo = tmp_path / "agentgte.db"
    with pytest.raises(NoStore, match="no store at"):
        Gate.open(POLICY, typo, create_store=False)
    with pytest.raises(InputError, match="create_store"):
        Gate.open(POLICY, typo, create_store="false")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []
    store = tmp_path / "agentgate.db"
    Gate.open(POLICY, store).close()  # the default creates it
    Gate.open(POLICY, store, create_store=False).close()


# --- PostgreSQL ----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_postgresql_database_without_agentgates_tables_is_no_store_and_gets_none(postgres_url: str) -> None:
    """Review R54: open_store(create=False) on a database of none of agentgate's tables created them there."""
    secret = postgres_url.replace("@/", ":s3cret-pw@/", 1)  # the test server trusts its socket
    with pytest.raises(NoStore, match="no store in the PostgreSQL database") as refused:
        open_store(secret, create=False)
    message = str(refused.value)
    assert refused.value.reason == "no_tables" and "agentgate store init --store" in message
    assert "s3cret-pw" not in message and ":***@" in message
    assert _tables(postgres_url) == set()


@pytest.mark.postgres
def test_gate_open_with_create_store_false_refuses_a_database_without_a_store(postgres_url: str) -> None:
    """Review R54: Gate.open on a database without agentgate's tables created them; create_store=False refuses."""
    with pytest.raises(NoStore):
        Gate.open(POLICY, postgres_url, create_store=False)
    assert _tables(postgres_url) == set()


@pytest.mark.postgres
def test_an_existing_postgresql_store_opens_with_create_false(postgres_url: str) -> None:
    """Review R54: create=False opens a PostgreSQL store that holds agentgate's tables."""
    with open_store(postgres_url) as created:
        GrantRepository(created).close()
    with open_store(postgres_url, create=False) as existing:
        assert existing.dialect == "postgresql"
        GrantRepository(existing).close()
