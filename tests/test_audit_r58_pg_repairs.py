"""A PostgreSQL writer's opening records as repaired only what it really puts back in force.

A writer's opening of the log (``AuditLog(...)``, a Gate, ``agentgate store init``) writes a row
of ``audit_repairs`` for each protection trigger it puts back, and ``audit verify`` reports each
row until it is accepted. Until review R58, on PostgreSQL:

- a trigger whose function (``agentgate_append_only``) another role owns was recorded as made
  again ("was not the one agentgate made ... put it back"), while ``CREATE OR REPLACE`` is run by
  the function's owner only: nothing was remade, edits stayed allowed, and the record was false;
- a disabled protection trigger (``ALTER TABLE ... DISABLE TRIGGER``) was left disabled by the
  table's owner, though a dropped one was put back.

Also checked: a trigger made again under agentgate's name in upper case (quoted, a name of its
own on PostgreSQL) is not agentgate's; agentgate's is made beside it and recorded as missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres, accept_repairs

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

RETURNS_THE_ROW = """CREATE OR REPLACE FUNCTION agentgate_append_only() RETURNS trigger LANGUAGE plpgsql
AS $fn$ BEGIN IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END; $fn$"""
"""The protection function made again to refuse nothing."""


def _database(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


@dataclass(frozen=True)
class Roles:
    owner: str
    """A role, not a superuser, that owns the store's tables and functions."""
    owner_url: str
    other: str
    """Another role, of which ``owner`` is not a member."""


@pytest.fixture
def roles(postgres_url: str) -> Iterator[Roles]:
    suffix = _database(postgres_url)
    owner, other = f"r58a_{suffix}", f"r58b_{suffix}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {owner} LOGIN")  # type: ignore[arg-type]
        conn.execute(f"CREATE ROLE {other}")  # type: ignore[arg-type]
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {owner}")  # type: ignore[arg-type]
    user = postgres_url.split("://", 1)[1].split("@", 1)[0]
    try:
        yield Roles(owner, postgres_url.replace(f"://{user}@", f"://{owner}@"), other)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {owner}, {other}")  # type: ignore[arg-type]
            conn.execute(f"DROP ROLE {owner}, {other}")  # type: ignore[arg-type]


def _filled(url: str) -> None:
    """A log of three entries, the first two covered by a checkpoint."""
    with _postgres(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        log.append(ENTRY)


def _update_refused(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("UPDATE audit_log SET entry = entry WHERE idx = 0")
        except psycopg.errors.RaiseException:
            return True
    return False


def _repairs(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(row[0]) for row in conn.execute("SELECT what FROM audit_repairs ORDER BY id")]


def test_a_function_another_role_owns_is_not_recorded_as_made_again(postgres_url: str, roles: Roles) -> None:
    """Review R58: a protection function owned by another role was recorded as repaired, not remade."""
    _filled(roles.owner_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER FUNCTION agentgate_append_only() OWNER TO {roles.other}")  # type: ignore[arg-type]
        conn.execute(RETURNS_THE_ROW)  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        lines = AuditLog(store, KEY, ORIGIN).unprotected()  # a writer's opening, as the owner
    assert not _update_refused(postgres_url)  # nothing could make it again ...
    assert _repairs(postgres_url) == []  # ... so nothing is recorded as made again
    assert len(lines) == 8  # each trigger that runs it: every protection trigger but next_index
    assert all(line.startswith("the protection trigger ") for line in lines)
    line = next(line for line in lines if " audit_log_append_only on table audit_log " in line)
    assert "its function public.agentgate_append_only() is not the one agentgate made" in line
    assert (
        f"its function's owner {roles.other} is not the table's owner {roles.owner}, whose `agentgate "
        f"store init` leaves the function as it is: `ALTER FUNCTION public.agentgate_append_only() OWNER TO "
        f"{roles.owner}` run as a superuser, then `agentgate store init` run as the store's owner makes it again"
    ) in line
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the fix the line names
        conn.execute(f"ALTER FUNCTION agentgate_append_only() OWNER TO {roles.owner}")  # type: ignore[arg-type]
    with _postgres(roles.owner_url) as store:
        lines = AuditLog(store, KEY, ORIGIN).unprotected()
    assert _update_refused(postgres_url)
    assert len(lines) == 8 and all(line.startswith("repair ") for line in lines)
    assert (
        "the protection trigger audit_log_append_only on table audit_log was not the one agentgate made"
        in (_repairs(postgres_url))
    )


@pytest.mark.parametrize("how", ["DISABLE", "ENABLE REPLICA"])
def test_a_disabled_trigger_is_enabled_by_the_owner_and_recorded(postgres_url: str, how: str) -> None:
    """Review R58: a writer's opening as the owner left a disabled PostgreSQL protection trigger disabled."""
    _filled(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE audit_log {how} TRIGGER audit_log_append_only")  # type: ignore[arg-type]
    assert not _update_refused(postgres_url)
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        (line,) = log.unprotected()
        assert _update_refused(postgres_url)
        with psycopg.connect(postgres_url) as conn:
            (state,) = conn.execute(
                "SELECT tgenabled FROM pg_trigger WHERE tgname = 'audit_log_append_only'"
            ).fetchone() or ("",)
        assert state == "A"
        assert line.startswith("repair 1 at ")
        assert "the protection trigger audit_log_append_only on table audit_log was disabled" in line
        assert "entries 2 to 2 were appended" in line
        assert accept_repairs(store) == [
            "the protection trigger audit_log_append_only on table audit_log was disabled"
        ]
        assert log.verify().ok


def test_a_trigger_made_again_in_upper_case_is_not_agentgates(postgres_url: str) -> None:
    """Review R58: a quoted upper-case "AUDIT_LOG_APPEND_ONLY" is another trigger; agentgate's is put back beside it."""
    _filled(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER audit_log_append_only ON audit_log")
        conn.execute(
            "CREATE FUNCTION refuses_nothing() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN RETURN NEW; END; $fn$"
        )
        conn.execute(
            'CREATE TRIGGER "AUDIT_LOG_APPEND_ONLY" BEFORE UPDATE ON audit_log '
            "FOR EACH ROW EXECUTE FUNCTION refuses_nothing()"
        )
    assert not _update_refused(postgres_url)
    # The quoted one is reported as a trigger agentgate did not make (review R59) until it is dropped.
    foreign = 'the trigger "AUDIT_LOG_APPEND_ONLY" on table audit_log is not one agentgate made'
    with _postgres(postgres_url) as store:
        missing, other = AuditLog(store, KEY, ORIGIN, create=False).unprotected()
    assert "audit_log_append_only on table audit_log is missing" in missing
    assert other.startswith(foreign)
    with _postgres(postgres_url) as store:
        other, repair = AuditLog(store, KEY, ORIGIN).unprotected()
    assert _update_refused(postgres_url)
    assert "audit_log_append_only on table audit_log was missing" in repair
    assert other.startswith(foreign)
    assert _repairs(postgres_url) == [
        "the protection trigger audit_log_append_only on table audit_log was missing"
    ]
