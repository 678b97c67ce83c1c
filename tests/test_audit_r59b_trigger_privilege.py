"""A role that may make triggers on a log table but does not own it puts no protection trigger back.

PostgreSQL 15 lets a role holding the TRIGGER privilege on a table run ``CREATE TRIGGER`` on it;
``DROP TRIGGER`` and ``ALTER TABLE ... ENABLE TRIGGER`` need the table's owner. A writer's opening
records the repair of a protection trigger only where this role owns the table
(``_RECORD_REPAIRS``). Until review R59 such a role's opening (``GRANT TRIGGER ON audit_log``)
put a dropped protection trigger back all the same, unrecorded: ``verify`` then said ``intact``,
though the entries appended while it was dropped were vouched for by nothing. Rules checked here:
that role's opening leaves the trigger missing (``verify`` goes on naming it); the owner's opening
puts it back and records the repair.
"""

from __future__ import annotations

import psycopg
import pytest
import test_audit_r58_pg_repairs as r58
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import Roles, _filled, _repairs

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

roles = r58.roles  # the fixture: an owner of the store that is not a superuser, and another role

PRESENT = "SELECT count(*) FROM pg_trigger WHERE tgname = 'audit_log_append_only'"


def test_a_role_with_the_trigger_privilege_does_not_put_a_trigger_back_unrecorded(
    postgres_url: str, roles: Roles
) -> None:
    """Review R59: a non-owner holding TRIGGER on audit_log put a dropped protection trigger back with no repair recorded."""
    _filled(roles.owner_url)
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:
        tables = "audit_log, audit_checkpoints, audit_repairs, agentgate_store_parts, audit_refs"
        conn.execute(f"GRANT SELECT, INSERT ON {tables} TO {roles.other}")  # type: ignore[arg-type]
        conn.execute(f"GRANT TRIGGER ON audit_log TO {roles.other}")  # type: ignore[arg-type]
        conn.execute("DROP TRIGGER audit_log_append_only ON audit_log")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {roles.other} LOGIN")  # type: ignore[arg-type]
    other_url = roles.owner_url.replace(f"://{roles.owner}@", f"://{roles.other}@")
    with _postgres(other_url) as store:
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening, not as the table's owner
        log.append(ENTRY)
        lines = log.unprotected()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(PRESENT).fetchone() == (0,)  # left for the owner, who records it
    assert _repairs(postgres_url) == []
    assert [line.split(":")[0] for line in lines] == [
        "the protection trigger audit_log_append_only on table audit_log is missing"
    ]
    with _postgres(roles.owner_url) as store:
        lines = AuditLog(store, KEY, ORIGIN).unprotected()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(PRESENT).fetchone() == (1,)
    assert _repairs(postgres_url) == [
        "the protection trigger audit_log_append_only on table audit_log was missing"
    ]
    assert len(lines) == 1 and lines[0].startswith("repair ")
