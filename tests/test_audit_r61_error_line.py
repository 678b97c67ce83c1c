"""A PostgreSQL failure is one line: the primary message and its SQLSTATE, not PL/pgSQL's context.

Until review R61 the generic ``StoreError`` of a failed PostgreSQL transaction quoted the driver's
whole text: a refusal raised in a PL/pgSQL function (a protection trigger's) carried lines of
``CONTEXT: PL/pgSQL function agentgate_append_only() line 3 at RAISE`` after it, which the CLI's
one-line error rule then ran together into its one line. Rules checked here: the message is
``PostgreSQL error: <primary message> (SQLSTATE <code>)``, on one line, with no context.
"""

from __future__ import annotations

import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres

from agentgate.errors import AuditError, StoreError
from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres


def test_a_refusal_raised_in_plpgsql_is_its_primary_message_and_sqlstate(postgres_url: str) -> None:
    """Review R61: a PostgreSQL error raised in a PL/pgSQL function carried its CONTEXT lines into the StoreError."""
    with _postgres(postgres_url) as store:
        AuditLog(store, KEY, ORIGIN).append(ENTRY)
        with pytest.raises(StoreError) as refused, store.transaction() as tx:
            tx.execute("UPDATE audit_log SET entry = entry WHERE idx = 0")
    assert (
        str(refused.value) == "PostgreSQL error: audit_log is append-only (UPDATE refused) (SQLSTATE P0001)"
    )


def test_an_error_without_context_keeps_its_message_and_sqlstate(postgres_url: str) -> None:
    """Review R61: dropping the context must keep the primary message of any server error."""
    with _postgres(postgres_url) as store, pytest.raises(StoreError) as refused, store.transaction() as tx:
        tx.execute("SELECT * FROM no_such_table")
    assert str(refused.value) == 'PostgreSQL error: relation "no_such_table" does not exist (SQLSTATE 42P01)'


def test_an_append_refused_by_the_server_is_one_line(postgres_url: str) -> None:
    """Review R61: an append the server refused quoted psycopg's LINE and HINT lines in its AuditError."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        with store.transaction() as tx:
            tx.execute("DROP FUNCTION agentgate_audit_lock_next()")
        with pytest.raises(AuditError) as refused:
            log.append(ENTRY)
    assert str(refused.value) == (
        "audit log: a statement failed: function public.agentgate_audit_lock_next() does not exist "
        "(SQLSTATE 42883)"
    )
