"""A transaction whose connection is lost before its COMMIT says which store lost it and that
nothing was written; one lost once the COMMIT was sent still says the outcome is unknown
(review R92), on the session's real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentgate.errors import CommitUnknown, StoreError
from agentgate.store._postgres import PostgresStore, _redact
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres

PASSWORD = "r92-secret"


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStore]:
    """A store whose URL holds a password (the socket's trust authentication ignores it), which
    no error may show."""
    url = postgres_server.create_database().replace("@/", f":{PASSWORD}@/", 1)
    opened = PostgresStore(url)
    opened.query("CREATE TABLE r92 (n integer)")
    yield opened
    opened.close()


def _terminate(store: PostgresStore, session: int) -> None:
    """End the server process ``session`` from another connection, as a DBA's
    ``pg_terminate_backend`` (or a server stopped with ``pg_ctl stop -m fast``) does, and wait
    until it has."""
    with psycopg.connect(store.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (session,))
        for _ in range(100_000):
            if admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (session,)).fetchone() is None:
                return
    pytest.fail(f"server process {session} never ended")


def _session(tx: Any) -> int:
    return int(tx.execute("SELECT pg_backend_pid()")[0][0])


def _said_lost_and_nothing_written(store: PostgresStore, error: StoreError) -> None:
    said = str(error)
    assert not isinstance(error, CommitUnknown), said
    assert PASSWORD not in said, said
    assert f"the connection to the PostgreSQL store {_redact(store.url)} was lost" in said, said
    assert "terminating connection" in said or "closed" in said, said  # libpq's line kept
    assert "the transaction was rolled back, nothing was written" in said, said
    assert store.query("SELECT count(*) FROM r92") == [(0,)]


def test_a_connection_lost_inside_a_transaction_names_the_store_and_says_nothing_was_written(
    store: PostgresStore,
) -> None:
    """Review R92: a statement that met its session ended (``pg_terminate_backend``, a server
    stopped) raised ``PostgreSQL error: terminating connection due to administrator command``,
    naming no store and saying nothing of what was written. The COMMIT was never sent: the
    server rolled the transaction back."""
    with pytest.raises(StoreError) as raised, store.transaction() as tx:
        tx.execute("INSERT INTO r92 VALUES (1)")
        _terminate(store, _session(tx))
        tx.execute("INSERT INTO r92 VALUES (2)")
    _said_lost_and_nothing_written(store, raised.value)


def test_a_part_that_meets_the_lost_connection_is_said_in_the_store_words(store: PostgresStore) -> None:
    """A part that runs its statement in the caller's transaction (``GrantRepository.within``)
    wraps the driver's error in its own words (``cannot record the revocation: terminating
    connection ...``): said as the store says a lost connection, as for a session ended for
    idling (review R71)."""
    repo = GrantRepository(store)
    try:
        with pytest.raises(StoreError) as raised, store.transaction() as tx, repo.within(tx):
            tx.execute("INSERT INTO r92 VALUES (1)")
            _terminate(store, _session(tx))
            repo.revoke("a" * 64, now=1)
        _said_lost_and_nothing_written(store, raised.value)
        assert store.query("SELECT count(*) FROM agentgate_revocations") == [(0,)]
    finally:
        repo.close()


def test_a_connection_lost_when_the_commit_is_sent_is_not_said_to_have_written_nothing(
    store: PostgresStore,
) -> None:
    """Where the connection is found lost only by the COMMIT, agentgate cannot tell whether the
    server read it: ``CommitUnknown``, never "nothing was written"."""
    with pytest.raises(CommitUnknown) as raised, store.transaction() as tx:
        tx.execute("INSERT INTO r92 VALUES (1)")
        _terminate(store, _session(tx))
    said = str(raised.value)
    assert PASSWORD not in said, said
    assert "may have committed it or not" in said and "nothing was written" not in said, said
