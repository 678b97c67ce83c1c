"""``verify`` reads a trigger's function by its schema-qualified name, not through the search path.

Until review R59 ``verify`` compared each PostgreSQL protection trigger with the function of its
name where the search path found it: with a function of the same name in another schema earlier on
the path, a trigger running agentgate's function in the store's schema, whose body was changed by
a role other than the table's owner, was said to "fire otherwise", and the fix named neither that
function's owner nor its schema (``agentgate store init``, which cannot replace another role's
function). Rules checked here: the function agentgate made for a trigger is the one of its name in
the trigger's table's schema, named so (``public.agentgate_append_only()``) in the line and in the
``ALTER FUNCTION ... OWNER TO`` it gives, whatever the path of the session that verifies.
"""

from __future__ import annotations

import psycopg
import pytest
import test_audit_r58_pg_repairs as r58
from test_audit_r57_repairs import KEY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import RETURNS_THE_ROW, Roles, _filled

from agentgate.store.audit import AuditLog
from agentgate.store.audit._schema import _PG_TRIGGER_FUNCTIONS

pytestmark = pytest.mark.postgres

roles = r58.roles  # the fixture: an owner of the store that is not a superuser, and another role

SHADOWED = "&options=-csearch_path%3Dshadow%2Cpublic"
"""A session whose search path puts the schema ``shadow`` before ``public``."""


def test_the_fix_line_names_the_function_the_trigger_calls(postgres_url: str, roles: Roles) -> None:
    """Review R59: a same-named function earlier on the search path made verify's fix line name the wrong function."""
    _filled(roles.owner_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER FUNCTION public.agentgate_append_only() OWNER TO {roles.other}")  # type: ignore[arg-type]
        conn.execute(RETURNS_THE_ROW)  # type: ignore[arg-type]
        conn.execute("CREATE SCHEMA shadow")
        conn.execute(f"GRANT USAGE ON SCHEMA shadow TO {roles.owner}")  # type: ignore[arg-type]
        conn.execute(  # agentgate's very body, in another schema, first on the path below
            "CREATE FUNCTION shadow.agentgate_append_only() RETURNS trigger LANGUAGE plpgsql AS $fn$"  # type: ignore[arg-type]
            + _PG_TRIGGER_FUNCTIONS["agentgate_append_only"]
            + "$fn$"
        )
    with _postgres(roles.owner_url + SHADOWED) as store:
        found = "SELECT pronamespace::regnamespace::text FROM pg_proc WHERE oid = to_regprocedure('agentgate_append_only()')"
        assert store.query(found) == [("shadow",)]  # the path finds the other one first
        lines = AuditLog(store, KEY, ORIGIN, create=False).unprotected()
    line = next(line for line in lines if " audit_log_append_only on table audit_log " in line)
    assert "its function public.agentgate_append_only() is not the one agentgate made" in line
    assert (
        f"its function's owner {roles.other} is not the table's owner {roles.owner}, whose `agentgate "
        "store init` leaves the function as it is: `ALTER FUNCTION public.agentgate_append_only() OWNER "
        f"TO {roles.owner}` run as a superuser"
    ) in line
    assert len(lines) == 8  # every trigger that runs it, read the same way (next_index runs another)
