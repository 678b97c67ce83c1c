"""Review R72: a ``PostgresStore`` built from a libpq key=value connection string
(``host=... password=secret ...``), not a URL, quoted it whole, password and all, in every error
that names the store (``_redact`` read URLs only). On the suite's real server, which ignores the
password on its socket: each place that names the store, and its repr and logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentgate.authority import GrantRepository
from agentgate.errors import NoStore, StoreError
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

_SECRET = "Zq1 it's Zq2"
"""The password: a space and a quote, which ``make_conninfo`` quotes and escapes."""


def _conninfo(url: str, **extra: str) -> str:
    """``url`` as a key=value connection string, with the password and ``extra``."""
    return make_conninfo("", **conninfo_to_dict(url), password=_SECRET, **extra)


@pytest.fixture
def conninfo(postgres_url: str) -> str:
    return _conninfo(postgres_url)


@pytest.fixture
def store(conninfo: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(conninfo)
    yield opened
    opened.close()


def _assert_masked(text: str) -> None:
    assert "Zq" not in text, text


def test_an_empty_database_opened_as_existing_names_it_masked(conninfo: str) -> None:
    """Review R72: the ``NoStore`` refusal (``create=False``, no tables) quoted the string."""
    with pytest.raises(NoStore) as refused:
        PostgresStore(conninfo, create=False).close()
    _assert_masked(str(refused.value))
    assert "password=***" in str(refused.value)


def test_the_busy_error_names_it_masked(postgres_url: str) -> None:
    """Review R72: the busy error (a lock held past ``lock_timeout``) quoted the string."""
    store = PostgresStore(_conninfo(postgres_url, options="-c lock_timeout=200ms"))
    repo = GrantRepository(store)
    holder: Any = psycopg.connect(postgres_url)
    try:
        holder.execute("LOCK TABLE agentgate_revocations IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreError, match="is busy") as refused:
            repo.revoke("ab" * 32, now=1)
    finally:
        holder.rollback()
        holder.close()
        repo.close()
        store.close()
    _assert_masked(str(refused.value))


def test_a_store_of_another_application_names_it_masked(postgres_url: str) -> None:
    """Review R72: the refusal of another application's table of agentgate's name quoted it."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE agentgate_grants (something text)")
    with pytest.raises(StoreError, match="not agentgate's") as refused:
        PostgresStore(_conninfo(postgres_url)).close()
    _assert_masked(str(refused.value))


def test_a_server_gone_names_it_masked(postgres_url: str) -> None:
    """Review R72: a store whose database is dropped under it: once its pool finds no
    connection, the error (``_no_connection``: the store, and libpq's reason) quoted it."""
    dbname = conninfo_to_dict(postgres_url)["dbname"]
    store = PostgresStore(_conninfo(postgres_url), timeout_s=2)
    said = []
    try:
        with psycopg.connect(postgres_url.replace(f"/{dbname}", "/postgres"), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
        for _ in range(2):  # the connection it held ended, then none to be had
            with pytest.raises(StoreError) as refused:
                store.query("SELECT 1")
            said.append(str(refused.value))
    finally:
        store.close()
    assert "unreachable" in said[-1], said
    _assert_masked(" ".join(said))


def test_repr_and_logs_never_show_it(conninfo: str, caplog: pytest.LogCaptureFixture) -> None:
    """A store's repr and what psycopg and its pool log while it opens and is used hold no
    piece of the password."""
    with caplog.at_level(logging.DEBUG):
        store = PostgresStore(conninfo)
        try:
            store.query("SELECT 1")
            _assert_masked(repr(store))
            _assert_masked(str(store))
        finally:
            store.close()
    _assert_masked(caplog.text)
