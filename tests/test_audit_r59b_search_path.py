"""A writer's opening makes and compares the protection triggers in the log tables' own schema.

Until review R59 the PostgreSQL DDL of a writer's opening (``AuditLog(...)``, a Gate, ``agentgate
store init``) found ``agentgate_append_only()`` through the session's search path: in ``CREATE OR
REPLACE FUNCTION``, in ``CREATE TRIGGER ... EXECUTE FUNCTION`` and in the comparison that drops a
changed trigger and records its repair. With a function of that name in a schema earlier on the
path (a schema named after the role, which ``"$user"`` puts first), the opening dropped each correct
trigger and made it again on the other schema's function (one that refuses nothing, where another
role owns it), or replaced that function's body and recorded false repairs. Rules checked here:
the opening reads, makes and compares the function of the tables' schema, leaves the other one
as it is, records nothing and leaves verify with nothing to report.
"""

from __future__ import annotations

import psycopg
import pytest
import test_audit_r58_pg_repairs as r58
from test_audit_r57_repairs import KEY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import Roles, _filled, _repairs, _update_refused

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

roles = r58.roles  # the fixture: an owner of the store that is not a superuser, and another role

REFUSES_NOTHING = """RETURNS trigger LANGUAGE plpgsql
AS $fn$ BEGIN IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END; $fn$"""
"""The body of a function of agentgate's name that refuses nothing."""

RUNS = (
    "SELECT t.tgname, p.pronamespace::regnamespace::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
    "WHERE NOT t.tgisinternal AND t.tgname LIKE '%append_only' ORDER BY 1"
)
"""Each append-only trigger and the schema of the function it runs."""


def _schemas_run(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {str(row[1]) for row in conn.execute(RUNS)}  # type: ignore[arg-type]


def test_a_function_earlier_on_the_path_that_another_role_owns_is_not_run(
    postgres_url: str, roles: Roles
) -> None:
    """Review R59: a same-named function earlier on the search path took the protection triggers' place."""
    _filled(roles.owner_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {roles.owner}")  # type: ignore[arg-type]  # "$user", first on the path
        conn.execute(f"GRANT USAGE ON SCHEMA {roles.owner} TO {roles.owner}")  # type: ignore[arg-type]
        conn.execute(f"CREATE FUNCTION {roles.owner}.agentgate_append_only() {REFUSES_NOTHING}")  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        assert store.query("SELECT (current_schemas(false))[1]") == [(roles.owner,)]
        lines = AuditLog(store, KEY, ORIGIN).unprotected()  # a writer's opening, as the owner
    assert _update_refused(roles.owner_url)
    assert _schemas_run(postgres_url) == {"public"}
    assert _repairs(postgres_url) == []
    assert not lines  # verify has nothing to report


def test_a_function_earlier_on_the_path_that_the_owner_owns_is_left(postgres_url: str, roles: Roles) -> None:
    """Review R59: a writer's opening replaced a same-named function earlier on the path and recorded false repairs."""
    _filled(roles.owner_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {roles.owner} AUTHORIZATION {roles.owner}")  # type: ignore[arg-type]
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:
        conn.execute(f"CREATE FUNCTION agentgate_append_only() {REFUSES_NOTHING}")  # type: ignore[arg-type]
        body = "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('agentgate_append_only()')"
        before = conn.execute(body).fetchall()  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        lines = AuditLog(store, KEY, ORIGIN).unprotected()
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:
        assert conn.execute(body).fetchall() == before  # type: ignore[arg-type]  # not the opening's to replace
    assert _update_refused(roles.owner_url)
    assert _schemas_run(postgres_url) == {"public"}
    assert _repairs(postgres_url) == []
    assert not lines  # verify has nothing to report
