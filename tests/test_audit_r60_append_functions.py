"""An append runs the log's own functions, not same-named ones earlier on the writer's search path.

Until review R60 a PostgreSQL append called ``agentgate_audit_lock_next()`` (the append lock and
the next index, in one round trip) by its bare name: the writer's search path found it, so a
function of that name in a schema earlier on the path (a schema named after the role, which
``"$user"`` puts first, owning a function of its own) ran at each append instead, and could
refuse the append or hand it another index without taking the lock. Rules checked here: an append
calls the function of the log tables' schema, and the next-index trigger runs the function of
that schema too (made with the path pinned since review R59), whatever functions of those names
the writer's path finds first.
"""

from __future__ import annotations

import psycopg
import pytest
import test_audit_r58_pg_repairs as r58
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import Roles, _filled

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

roles = r58.roles  # the fixture: an owner of the store that is not a superuser, and another role

DECOYS = {
    "agentgate_audit_lock_next": "RETURNS bigint LANGUAGE plpgsql AS $fn$ BEGIN "
    "RAISE EXCEPTION 'decoy agentgate_audit_lock_next ran'; END; $fn$",
    "agentgate_audit_next_index": "RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN "
    "RAISE EXCEPTION 'decoy agentgate_audit_next_index ran'; END; $fn$",
}
"""A function of each name that refuses whatever runs it."""


@pytest.mark.parametrize("name", sorted(DECOYS))
def test_an_append_runs_the_log_schemas_function_not_one_earlier_on_the_path(
    postgres_url: str, roles: Roles, name: str
) -> None:
    """Review R60: an append ran a same-named agentgate_audit_lock_next() earlier on the writer's search path."""
    _filled(roles.owner_url)  # entries 0 to 2
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {roles.owner} AUTHORIZATION {roles.owner}")  # type: ignore[arg-type]
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:  # "$user": first on the path
        conn.execute(f"CREATE FUNCTION {roles.owner}.{name}() {DECOYS[name]}")  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        found = (
            f"SELECT pronamespace::regnamespace::text FROM pg_proc WHERE oid = to_regprocedure('{name}()')"
        )
        assert store.query(found) == [(roles.owner,)]  # the path finds the decoy first
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening, as the owner
        assert log.append(ENTRY) == 3
        assert log.append_many([ENTRY] * 2) == [4, 5]
        assert log.size() == 6
        assert not log.unprotected()


def test_an_append_to_a_log_in_a_schema_named_with_a_question_mark(postgres_url: str, roles: Roles) -> None:
    """Review R60: the schema-qualified call must not break a schema whose name holds the store's parameter mark."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "odd?s" AUTHORIZATION {roles.owner}')  # type: ignore[arg-type]
        conn.execute(f'ALTER ROLE {roles.owner} SET search_path TO "odd?s"')  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert log.append(ENTRY) == 0
        assert log.append_many([ENTRY] * 2) == [1, 2]
        where = "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = to_regclass('audit_log')"
        assert store.query(where) == [('"odd?s"',)]
        assert not log.unprotected()
