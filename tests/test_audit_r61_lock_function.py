"""``verify`` reports a replaced append function, and a writer's opening makes it again, recorded.

Every PostgreSQL append calls ``agentgate_audit_lock_next()`` of the log tables' schema: it takes
the append lock and reads the next index. Until review R61 it was made only when missing: one
replaced in the log's own schema (one that skips the advisory lock, letting two writers
interleave, or that appends rows of its own as the appending role) was reported by nothing, and
kept by every writer's opening, though a replaced trigger function is reported and made again.
Rules checked here: ``verify`` names it (its body, language, volatility, security, settings or
return type changed; or missing) with what makes it again; a writer's opening as its owner makes
it again and records the repair in ``audit_repairs`` (reported until accepted); one owned by a
role of which the table's owner is not a member is left, recorded as nothing, and the line names
``ALTER FUNCTION ... OWNER TO`` first.
"""

from __future__ import annotations

import psycopg
import pytest
import test_audit_r58_pg_repairs as r58
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres, accept_repairs
from test_audit_r58_pg_repairs import Roles, _filled, _repairs
from test_audit_r60_rule_closing_line import _log, _verify

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

roles = r58.roles  # the fixture: an owner of the store that is not a superuser, and another role

NO_LOCK = """CREATE OR REPLACE FUNCTION agentgate_audit_lock_next() RETURNS bigint LANGUAGE plpgsql
VOLATILE AS $fn$ BEGIN RETURN (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log); END; $fn$"""
"""The append function made again to skip the append lock (two writers may interleave)."""

CHANGES = {
    "its body": NO_LOCK,
    "its volatility": "ALTER FUNCTION agentgate_audit_lock_next() IMMUTABLE",
    "its settings": "ALTER FUNCTION agentgate_audit_lock_next() SET search_path = public, pg_catalog",
    "its security": "ALTER FUNCTION agentgate_audit_lock_next() SECURITY DEFINER",
    "its return type": "DROP FUNCTION agentgate_audit_lock_next(); "
    "CREATE FUNCTION agentgate_audit_lock_next() RETURNS numeric LANGUAGE plpgsql VOLATILE AS $fn$ "
    "BEGIN PERFORM pg_advisory_xact_lock(27416741019937140); "
    "RETURN (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log); END; $fn$",
}
"""Each way the function can be made otherwise than agentgate makes it, by its owner."""


def _changed(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _takes_the_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE oid = 'agentgate_audit_lock_next()'::regprocedure"
        )
        return "pg_advisory_xact_lock(27416741019937140)" in str((row.fetchone() or ("",))[0])


def _read_only_lines(url: str) -> tuple[str, ...]:
    with _postgres(url) as store:
        return AuditLog(store, KEY.public, ORIGIN, create=False).unprotected()


@pytest.mark.parametrize("how", sorted(CHANGES))
def test_a_replaced_append_function_is_reported_then_made_again_and_recorded(
    postgres_url: str, how: str
) -> None:
    """Review R61: a replaced agentgate_audit_lock_next() in the log's schema was reported by nothing and kept."""
    _filled(postgres_url)  # entries 0 to 2, the first two checkpointed
    _changed(postgres_url, CHANGES[how])
    (line,) = _read_only_lines(postgres_url)
    assert line.startswith(
        "the append function public.agentgate_audit_lock_next() is not the one agentgate made"
    )
    assert "(its body, language, volatility, security, settings or return type were changed)" in line
    assert "skip the append lock" in line
    assert line.endswith("`agentgate store init` run as the store's owner makes it again")
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening, as the owner
        (repair,) = log.unprotected()
        assert repair.startswith("repair 1 at ")
        assert "entries 2 to 2 were appended" in repair
        assert log.append(ENTRY) == 3
        assert accept_repairs(store) == [
            "the append function public.agentgate_audit_lock_next() was not the one agentgate made"
        ]
        assert log.verify().ok
    assert _takes_the_lock(postgres_url)
    assert _read_only_lines(postgres_url) == ()


def test_a_dropped_append_function_is_reported_as_missing(postgres_url: str) -> None:
    """Review R61: a dropped agentgate_audit_lock_next() (every append fails) was reported by nothing."""
    _filled(postgres_url)
    _changed(postgres_url, "DROP FUNCTION agentgate_audit_lock_next()")
    (line,) = _read_only_lines(postgres_url)
    assert line.startswith(
        "the append function public.agentgate_audit_lock_next() is missing: every append fails"
    )
    assert line.endswith("`agentgate store init` run as the store's owner puts it back")
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert log.append(ENTRY) == 3
        assert not log.unprotected()  # no entry was appended while it was missing: no repair
    assert _repairs(postgres_url) == []


def test_an_append_function_another_role_owns_is_left_and_named(postgres_url: str, roles: Roles) -> None:
    """Review R61: the line for a replaced append function owned by another role names the owner change first."""
    _filled(roles.owner_url)
    _changed(postgres_url, f"ALTER FUNCTION agentgate_audit_lock_next() OWNER TO {roles.other}")
    _changed(postgres_url, NO_LOCK)
    with _postgres(roles.owner_url) as store:
        (line,) = AuditLog(store, KEY, ORIGIN).unprotected()  # a writer's opening, as the table's owner
    assert not _takes_the_lock(postgres_url)  # it may not make it again ...
    assert _repairs(postgres_url) == []  # ... so nothing is recorded as made again
    assert line.startswith(
        "the append function public.agentgate_audit_lock_next() is not the one agentgate made"
    )
    assert (
        f"its owner {roles.other} is not the table's owner {roles.owner}, whose `agentgate store init` "
        f"leaves the function as it is: `ALTER FUNCTION public.agentgate_audit_lock_next() OWNER TO "
        f"{roles.owner}` run as a superuser, then `agentgate store init` run as the store's owner makes it again"
    ) in line
    _changed(postgres_url, f"ALTER FUNCTION agentgate_audit_lock_next() OWNER TO {roles.owner}")
    with _postgres(roles.owner_url) as store:
        (repair,) = AuditLog(store, KEY, ORIGIN).unprotected()
    assert repair.startswith("repair 1 at ")
    assert _takes_the_lock(postgres_url)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (NO_LOCK, "the function every append runs is not agentgate's"),
        ("DROP FUNCTION agentgate_audit_lock_next()", "every append fails until the append function is back"),
    ],
)
def test_verify_closes_with_words_of_the_append_function(
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: str,
    said: str,
) -> None:
    """Review R61: the closing line for a replaced append function alone must not speak of triggers."""
    _log(postgres_url, change)
    code, out = _verify(postgres_url, monkeypatch, capsys)
    assert code == 1
    assert out.startswith(
        "TAMPERED: 1 problem(s)\n  - the append function public.agentgate_audit_lock_next() "
    )
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 2 entries")
    assert "nothing refuses an edit" not in closing and "trigger" not in closing
    assert said in closing
