"""The PostgreSQL store (agentgate/store/_postgres.py): its connection pool's settings from the
environment, an application role on a store missing new tables told to run `store init`, and
another application's database refused as the store opens (review r53: its `audit_log` got
agentgate's triggers, a command that only reads created agentgate's tables beside it)."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
import warnings
from typing import Any

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.audit import create_audit_tables
from agentgate.store.grants import GrantRepository
from agentgate.store.once import OnceCalls


def test_the_application_role_on_a_store_missing_new_tables_is_told_to_run_store_init(
    postgres_server: Any,
) -> None:
    """Started as the application role (no CREATE on the schema) on a store an earlier version
    wrote, a part whose table is new fails with PostgreSQL's text only ("PostgreSQL error:
    permission denied for schema public LINE 1: CREATE TABLE IF NOT EXISTS agentgate_once"),
    not saying to run ``agentgate store init`` as the owner. PostgresStore.ensure_schema is the
    one place that sees every part's DDL."""
    url = postgres_server.create_database()
    role = "r33o_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute("DROP TABLE agentgate_once")  # the store as it was before the table existed
        tx.execute(f"CREATE ROLE {role} LOGIN")
        tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        tx.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    app = PostgresStore(url.replace(f"postgresql://{postgres_server.user}@", f"postgresql://{role}@"))
    try:
        with pytest.raises(StoreError, match="agentgate store init"):
            OnceCalls(app)
    finally:
        app.close()


@pytest.mark.postgres
def test_the_pool_takes_its_size_and_wait_from_the_environment(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgate.store import open_store

    monkeypatch.setenv("AGENTGATE_PG_POOL_SIZE", "20")
    monkeypatch.setenv("AGENTGATE_PG_POOL_TIMEOUT", "2.5")
    with open_store(postgres_url) as store:
        assert (store.pool.max_size, store.pool.timeout) == (20, 2.5)  # type: ignore[attr-defined]
    monkeypatch.delenv("AGENTGATE_PG_POOL_SIZE")
    monkeypatch.delenv("AGENTGATE_PG_POOL_TIMEOUT")
    with open_store(postgres_url) as store:
        assert (store.pool.max_size, store.pool.timeout) == (8, 10.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AGENTGATE_PG_POOL_SIZE", "0", "from 1 to 1000 connections, got 0"),
        ("AGENTGATE_PG_POOL_SIZE", "eight", "whole number of connections, got 'eight'"),
        ("AGENTGATE_PG_POOL_SIZE", "1001", "from 1 to 1000"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "0", "more than 0 and at most 3600 seconds, got 0.0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "nan", "more than 0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "inf", "more than 0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "10s", "a number of seconds, got '10s'"),
    ],
)
def test_a_pool_setting_out_of_range_is_one_line_naming_the_variable_before_any_connection(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str, message: str
) -> None:
    from agentgate.cli.main import main
    from agentgate.errors import InputError
    from agentgate.store import open_store

    monkeypatch.setenv(name, value)
    # No server listens there: the setting is refused before anything tries to connect.
    url = "postgresql://nobody@/agentgate?host=/nonexistent-socket-dir&port=1"
    with pytest.raises(InputError, match=f"{name} must be .*{message}"):
        open_store(url)
    assert main(["audit", "verify", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "Traceback" not in err


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        return [row[0] for row in rows]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "argv",
    [["store", "init"], ["approval", "list"], ["audit", "verify"], ["store", "prune", "--older-than", "1d"]],
)
def test_another_applications_table_of_agentgates_name_is_refused_whole_and_left_as_it_was(
    postgres_server: Any, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A PostgreSQL database of another application holding a table of one of agentgate's names
    (its ``audit_log``): ``store init`` said "audit log: ready", put agentgate's append-only
    triggers on that table (the application's own INSERT then failed with ``record "new" has no
    field "idx"``, its UPDATE and DELETE as "append-only") and stopped half-way at the approvals;
    ``approval list`` created nine tables there and answered "no open approval requests". As a
    SQLite file of one is refused (test_store_hostile_files), it is refused as the store opens:
    one line, nothing created, the application's table still its own."""
    url = postgres_server.create_database()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE audit_log (id serial PRIMARY KEY, msg text)")
        conn.execute("INSERT INTO audit_log (msg) VALUES ('theirs')")
    with pytest.raises(
        StoreError, match=r"table or view audit_log that is not agentgate's \(no column entry, idx"
    ):
        PostgresStore(url)
    assert main([*argv, "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "audit_log" in err and "another application's database" in err
    assert _tables(url) == ["audit_log"]
    with psycopg.connect(url) as conn:  # the other application still owns its table
        conn.execute("INSERT INTO audit_log (msg) VALUES ('more')")
        conn.execute("UPDATE audit_log SET msg = 'edited'")
        conn.execute("DELETE FROM audit_log")


@pytest.mark.postgres
def test_a_view_of_agentgates_table_name_is_refused_before_any_table_is_created(postgres_url: str) -> None:
    """A view named ``approvals`` (another application's): ``store init`` created the audit,
    grant, ledger and quota tables beside it, then failed on ``cannot create index on relation
    "approvals"``."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE theirs (id int, who text)")
        conn.execute("CREATE VIEW approvals AS SELECT id, who FROM theirs")
    with pytest.raises(StoreError, match=r"table or view approvals that is not agentgate's"):
        PostgresStore(postgres_url)
    assert main(["store", "init", "--store", postgres_url]) == 2
    assert _tables(postgres_url) == ["theirs"]


@pytest.mark.postgres
def test_a_store_agentgate_made_with_extra_columns_opens(postgres_url: str) -> None:
    """The check passes agentgate's own tables, and one given more columns (a later release)."""
    assert main(["store", "init", "--store", postgres_url]) == 0
    with psycopg.connect(postgres_url) as conn:
        conn.execute("ALTER TABLE audit_log ADD COLUMN added_later text")
    with PostgresStore(postgres_url) as store:
        assert create_audit_tables(store)


_FORKED: list[PostgresStore] = []
"""The store the children of ``test_a_store_opened_before_a_fork_...`` inherit (fork copies it)."""


def _claim_in_child(keys: int) -> int:
    """In a forked child: claim each of ``keys`` keys once; how many this child claimed first."""
    (store,) = _FORKED
    won = 0
    for key in range(keys):
        with store.transaction() as tx:
            tx.execute("INSERT INTO forked (k) VALUES (?) ON CONFLICT (k) DO NOTHING", (f"k{key}",))
            won += tx.rowcount
    return won


def _close_in_child() -> None:
    (store,) = _FORKED
    store.close()


@pytest.mark.postgres
def test_a_store_opened_before_a_fork_serves_each_child_on_connections_of_its_own(postgres_url: str) -> None:
    """A store (a Gate) opened before ``fork`` (multiprocessing's default on Linux, gunicorn's
    ``--preload``): the children used the parent's pooled connections, whose sockets are the
    parent's sessions, all at once, and every child hung in its first transaction; a child that
    closed the store ended the parent's sessions. Now each child opens a pool of its own on
    first use and leaves the inherited one alone (review r53)."""
    store = PostgresStore(postgres_url)
    _FORKED[:] = [store]
    context = multiprocessing.get_context("fork")
    try:
        store.query("CREATE TABLE forked (k TEXT PRIMARY KEY)")
        with warnings.catch_warnings():  # Python >= 3.12 warns of fork() beside the pool's threads
            warnings.simplefilter("ignore", DeprecationWarning)
            children = context.Pool(4)
            closer = context.Process(target=_close_in_child)
            closer.start()
        try:
            claimed = children.map_async(_claim_in_child, [50] * 4).get(timeout=120)
        finally:
            children.terminate()
            children.join()
        closer.join(timeout=60)
        assert sum(claimed) == 50  # every key claimed once, by exactly one child
        # The parent's sessions outlived the children, the one that closed the store included.
        assert store.query("SELECT count(*) FROM forked") == [(50,)]
    finally:
        _FORKED.clear()
        store.close()


def test_a_replay_racing_its_first_presentation_is_a_replay_on_a_serializable_database(
    postgres_server: Any,
) -> None:
    """Review R57: on a database whose ``default_transaction_isolation`` is ``serializable``, the
    nonce statement of an unbound decision (one autocommit round trip, where the pool's READ
    COMMITTED, set per transaction, does not apply) that met the same nonce inserted by a
    decision still committing failed with "could not serialize access due to concurrent update":
    a ``StoreError``, read as "the revocation state cannot be read". Rule: it waits for the other
    decision and is a ``replay``, as at READ COMMITTED (a deny either way, for the right reason)."""
    url = postgres_server.create_database()
    with PostgresStore(url) as owner, owner.transaction() as tx:
        database = tx.execute("SELECT current_database()")[0][0]
        tx.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = 'serializable'")
    with PostgresStore(url, max_size=4) as store:
        repo = GrantRepository(store)
        second: list[object] = []

        def present_again() -> None:
            try:
                second.append(repo.consume_nonce("did:key:zA", "n-1", 2**40, ["g1"]))
            except StoreError as exc:
                second.append(exc)

        again = threading.Thread(target=present_again)
        with store.transaction() as tx:
            with repo.within(tx):  # the first presentation, recorded with its decision
                assert repo.consume_nonce("did:key:zA", "n-1", 2**40, ["g1"]) == "fresh"
            again.start()
            waiting = _waits_for_a_lock(store)
        again.join(timeout=30)
        assert waiting  # the second presentation met the first one's key before it committed
        assert second == ["replay"]
        repo.close()


def _waits_for_a_lock(store: PostgresStore) -> bool:
    """Whether another session of the database comes to wait for a row lock (within 10 s)."""
    for _ in range(1000):
        if store.query(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )[0][0]:
            return True
        time.sleep(0.01)
    return False
