"""The first connection a PostgreSQL store opens keeps the ``connect_timeout`` its URL or
``PGCONNECT_TIMEOUT`` sets (review R67)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentgate.store._postgres import POOL_CONNECT_TIMEOUT_S, PostgresStore

pytestmark = pytest.mark.postgres


def _first_connect_timeout(url: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The ``connect_timeout`` libpq used for the connection ``PostgresStore`` opens first (read
    from that real connection: ``psycopg.connect`` is wrapped, not replaced)."""
    real = psycopg.connect
    seen: list[str | None] = []

    def connect(*args: Any, **kwargs: Any) -> Any:
        conn = real(*args, **kwargs)
        seen.append(conn.info.get_parameters().get("connect_timeout"))
        return conn

    with monkeypatch.context() as patched:
        patched.setattr(psycopg, "connect", connect)
        PostgresStore(url).close()
    assert seen, "no first connection"
    return seen[0]


@pytest.mark.parametrize("where", ["url", "environment"])
def test_the_first_connection_keeps_the_connect_timeout_the_operator_set(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Review R67: the store's first connection (the one that says why a server cannot be
    reached) was always given ``connect_timeout=10``, over the URL's ``connect_timeout=2`` or
    ``PGCONNECT_TIMEOUT=2``: opening a store whose first host does not answer (a multi-host URL
    failing over, a short timeout chosen for a fast refusal) waited 10 s per host, where the
    pool's connections keep the operator's value as docs/operations.md says. It keeps it now;
    without one it is still ``POOL_CONNECT_TIMEOUT_S``."""
    if where == "url":
        url = postgres_url + "&connect_timeout=2"
    else:
        url = postgres_url
        monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")
    assert _first_connect_timeout(url, monkeypatch) == "2"
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert _first_connect_timeout(postgres_url, monkeypatch) == str(POOL_CONNECT_TIMEOUT_S)
