"""Review R30: PostgreSQL in operation. docs/operations.md followed literally, as an operator, on
the real server of the ``postgres_server`` fixture: connection limits and an exhausted pool, the
least-privilege recipe, backup and restore with ``pg_dump``/``pg_restore``, and a Gate deciding
in threads while the server is stopped and started again."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def _role_url(url: str, server: Any, role: str) -> str:
    return url.replace(f"postgresql://{server.user}@", f"postgresql://{role}@")


@contextmanager
def _held(store: PostgresStore) -> Iterator[None]:
    """One of ``store``'s connections held in an open transaction by another thread."""
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction() as tx:
            tx.execute("SELECT 1")
            inside.set()
            done.wait(timeout=30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(timeout=30)
    try:
        yield
    finally:
        done.set()
        thread.join()


# --- a pool that gets no connection says why -----------------------------------------------------


def test_a_role_at_its_connection_limit_is_named_not_only_a_timeout(postgres_server: Any) -> None:
    """The pool's timeout was the whole message ("couldn't get a connection after 10.00 sec"):
    the branch meant to say more never ran (``PoolTimeout`` is a ``psycopg.Error``), and nothing
    said the server refused this role more connections."""
    url = postgres_server.create_database()
    role = "r30_" + uuid.uuid4().hex[:8]
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    with PostgresStore(_role_url(url, postgres_server, role), max_size=2) as app:
        app.pool.timeout = 0.5
        with _held(app), pytest.raises(StoreError) as raised, app.transaction() as tx:
            tx.execute("SELECT 1")
        assert "unreachable" in str(raised.value) and f'too many connections for role "{role}"' in str(
            raised.value
        )
        with app.transaction() as tx:  # the connection is back: the same store goes on
            assert tx.execute("SELECT 1") == [(1,)]


def test_a_pool_whose_connections_are_all_in_use_says_so(postgres_server: Any) -> None:
    with PostgresStore(postgres_server.create_database(), max_size=1) as store:
        store.pool.timeout = 0.5
        with (
            _held(store),
            pytest.raises(StoreError, match="all 1 connections of this process's pool stayed in use"),
        ):
            store.query("SELECT 1")
