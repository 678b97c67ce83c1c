"""Review R68: the server's ``idle_session_timeout`` is read once per connection, as it opens
(``_read_committed``), never per decision: lowered later by a reload (``ALTER SYSTEM`` and
``pg_reload_conf()``, which reaches sessions already open), a connection opened before still
waits ``IDLE_CHECK_S`` before it is tested. What that costs is bounded, and pinned here."""

from __future__ import annotations

import time

import psycopg
import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import IDLE_CHECK_S, PostgresStore

pytestmark = pytest.mark.postgres

TIMEOUT_S = 1
"""The ``idle_session_timeout`` the reload sets: shorter than ``IDLE_CHECK_S``."""


def _server_wide(url: str, value: str | None) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        if value is None:
            admin.execute("ALTER SYSTEM RESET idle_session_timeout")
        else:
            admin.execute(f"ALTER SYSTEM SET idle_session_timeout = '{value}'")
        admin.execute("SELECT pg_reload_conf()")


def test_a_timeout_lowered_by_a_reload_costs_at_most_one_statement_per_pool(postgres_url: str) -> None:
    """Review R68 (decided: kept, documented in docs/operations.md): the session the pool opened
    before the reload is ended by the server after ``TIMEOUT_S`` idle, and the statement that
    takes it, not tested (its idle time is under ``IDLE_CHECK_S``), fails once with
    ``StoreError``; the pool then tests and reopens its connections, which read the new timeout,
    and every later statement after a quiet spell goes through."""
    assert TIMEOUT_S < IDLE_CHECK_S
    store = PostgresStore(postgres_url, max_size=1)
    try:
        assert store.query("SELECT 1") == [(1,)]
        _server_wide(postgres_url, f"{TIMEOUT_S}s")
        failed = 0
        for _ in range(3):
            time.sleep(TIMEOUT_S + 1)  # the server ends the idle session meanwhile
            try:
                assert store.query("SELECT 1") == [(1,)]
            except StoreError:
                failed += 1
        assert failed <= 1
    finally:
        _server_wide(postgres_url, None)
        store.close()
