"""A connection lost at the audit append is an ``AuditError`` (docs/operations.md) that says, as
the store says it for every other statement (review R92), which store lost it and that nothing
was written, and the pool's other idle connections are tested then (review R93), on the
session's real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_store_r92_pg_lost_connection import _session, _terminate

from agentgate.errors import AuditError, StoreError
from agentgate.keys import SigningKey
from agentgate.store._postgres import PostgresStore, _redact
from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

PASSWORD = "r93-secret"
ENTRY = {"kind": "deny", "principal": "agent", "resource": "tool:refund", "reasons": ["r93"]}


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStore]:
    """A store of two connections whose URL holds a password (the socket's trust authentication
    ignores it), which no error may show."""
    url = postgres_server.create_database().replace("@/", f":{PASSWORD}@/", 1)
    opened = PostgresStore(url, max_size=2)
    yield opened
    opened.close()


def test_a_connection_lost_at_the_audit_append_names_the_store_and_rechecks_the_pool(
    store: PostgresStore,
) -> None:
    """Review R93: a Gate's transaction whose server process ended before its audit append (a
    DBA's ``pg_terminate_backend``, a crash, a failover) raised ``audit log: a statement failed:
    terminating connection due to administrator command``, naming no store nor what was written,
    and the pool's other connections, ended with it, each failed one more decision. The pool's
    second connection here sat idle for less than ``IDLE_CHECK_S``: only the recheck finds it
    dead before the next statement takes it."""
    log = AuditLog(store, SigningKey.generate())
    log.append(ENTRY)
    with pytest.raises(AuditError) as raised, store.transaction() as tx:
        idle = int(store.query("SELECT pg_backend_pid()")[0][0])  # the pool's other connection
        _terminate(store, idle)
        _terminate(store, _session(tx))
        log.append(ENTRY, tx)
    said = str(raised.value)
    assert not isinstance(raised.value, StoreError), said  # the documented type
    assert PASSWORD not in said, said
    assert said.startswith(
        f"audit log: the connection to the PostgreSQL store {_redact(store.url)} was lost"
    ), said
    assert "terminating connection" in said, said  # libpq's line kept
    assert said.endswith("the transaction was rolled back, nothing was written"), said
    assert store.query("SELECT count(*) FROM audit_log") == [(1,)]  # the recheck replaced the idle one
