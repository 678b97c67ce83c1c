"""PostgreSQL store URLs and sessions that cannot work, refused at once naming why (review R60):
a query parameter libpq does not know, a ``connect_timeout`` that is not a number, and a server
or session that takes no writes (a hot standby, ``default_transaction_read_only``)."""

from __future__ import annotations

import time

import pytest

from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres

READ_ONLY = "&options=-c%20default_transaction_read_only%3Don"


@pytest.mark.parametrize(
    ("query", "named", "unnamed"),
    [
        ("sslmod=require", "'sslmod'", None),
        ("Host=db&sslmode=require", "'Host'", None),
        # "cret" is the rest of the password (libpq would read it as a parameter): never named,
        # nor is a name after it before a parameter libpq knows (masked with the password).
        ("password=se&cret&frob=1&sslmode=disable&frob2=1", "'frob2'", "cret"),
    ],
)
def test_a_url_parameter_libpq_does_not_know_is_named(query: str, named: str, unnamed: str | None) -> None:
    """Review R60: a misspelt URL parameter (``sslmod=require``) was refused as only "not a valid
    PostgreSQL URL", without saying which part was wrong; the error names it, and never a part of
    a password."""
    with pytest.raises(StoreError, match="not a valid PostgreSQL URL") as refused:
        PostgresStore(f"postgresql://alice@/agentgate?host=/nonexistent&{query}")
    assert f"libpq knows no parameter {named}" in str(refused.value)
    if unnamed is not None:
        assert unnamed not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        # libpq takes a "?" in the user name as written: "pw&frob=x" is the password.
        "postgresql://al?ce:pw&frob=x@/agentgate?host=/nonexistent&sslmod=1",
        # unencoded "/": libpq reads the port "hun" and the query "frob=x/2@/agentgate?...".
        "postgresql://alice:hun?frob=x/2@/agentgate?host=/nonexistent&sslmod=1",
    ],
)
def test_a_parameter_named_is_never_a_part_of_a_password_holding_a_question_mark(url: str) -> None:
    """Review R60: what reads as a parameter inside a password is never named."""
    with pytest.raises(StoreError, match="not a valid PostgreSQL URL") as refused:
        PostgresStore(url)
    assert "libpq knows no parameter 'sslmod'" in str(refused.value)
    assert "frob" not in str(refused.value)


@pytest.mark.parametrize("value", ["abc", "", "10s"])
def test_a_connect_timeout_that_is_not_a_number_is_refused_at_once_naming_it(
    postgres_url: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R60: a URL whose ``connect_timeout`` is not a number (``connect_timeout=10s``)
    opened its first connection (given a timeout of its own) and then waited the pool's 10 s,
    failing as "pool initialization incomplete after 10.0 sec" without naming the setting; it is
    refused before any connection, naming it, from the URL or from ``PGCONNECT_TIMEOUT``."""
    began = time.monotonic()
    with pytest.raises(
        StoreError, match=f"the URL's connect_timeout must be a number of seconds, got '{value}'"
    ):
        PostgresStore(f"{postgres_url}&connect_timeout={value}")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", value)
    with pytest.raises(StoreError, match=f"PGCONNECT_TIMEOUT must be a number of seconds, got '{value}'"):
        PostgresStore(postgres_url)
    assert time.monotonic() - began < 5  # not the pool's wait


def test_a_read_only_server_is_refused_as_the_store_opens_and_still_read_where_asked(
    postgres_url: str,
) -> None:
    """Review R60: a URL of a server or session that takes no writes (a replica, or
    ``default_transaction_read_only``) opened, and the first Gate failed with "cannot execute
    INSERT in a read-only transaction" and a page of PL/pgSQL context; it is refused as it opens,
    saying so and pointing at the primary. Opened to read only (the CLI's reading verbs), such a
    URL still works."""
    GrantRepository(writable := PostgresStore(postgres_url)).close()
    writable.close()
    with pytest.raises(
        StoreError, match=r"takes no writes in this session \(transaction_read_only is on\)"
    ) as refused:
        open_store(postgres_url + READ_ONLY)
    assert "point the store at the primary" in str(refused.value)
    reader = PostgresStore(postgres_url + READ_ONLY, create=False, read_only=True)
    assert reader.query("SELECT count(*) FROM agentgate_revocations") == [(0,)]
    reader.close()


def test_a_write_refused_by_a_session_that_became_read_only_names_the_cause(postgres_url: str) -> None:
    """Review R60: a write refused with SQLSTATE 25006 after the store opened (a failover that
    left the URL on a standby, a role or database set read only since) was "PostgreSQL error:
    cannot execute INSERT in a read-only transaction" and its context; it says the server takes
    no writes and points at the primary, and nothing is written."""
    store = PostgresStore(postgres_url)
    repo = GrantRepository(store)
    with (
        pytest.raises(StoreError, match="takes no writes in this session") as refused,
        store.transaction() as tx,
    ):
        tx.execute("SET TRANSACTION READ ONLY")
        tx.execute("INSERT INTO agentgate_revocations (grant_id, revoked_at, reason) VALUES ('g', 1, '')")
    assert "cannot execute INSERT in a read-only transaction" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert repo.revoked(["g"]) == set()
    repo.close()
    store.close()
