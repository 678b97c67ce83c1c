"""``audit verify`` names every trigger on the log's tables that agentgate did not make.

Until review R59 only agentgate's own triggers were looked for: an owner's extra trigger on
``audit_log`` was never reported, though a ``BEFORE INSERT`` trigger can rewrite each entry as it
is appended (PostgreSQL: its leaf hash with it, so the entry verifies) or drop it silently
(SQLite's ``RAISE(IGNORE)``), and the next checkpoint signed what it wrote. Rules checked here: such
a trigger, BEFORE or AFTER, is a problem of ``verify`` (``unprotected``: TAMPERED, exit 1) naming
it, its table and ``DROP TRIGGER``; ``checkpoint`` refuses to sign while it is there; a writer's
opening leaves it; agentgate's own triggers (SQLite: in any letter case) are not reported.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres

from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

DENY = {"kind": "deny", "principal": "did:key:zA", "resource": "tool:t"}

DROPS_DENIES = (
    "CREATE TRIGGER keep_it_quiet BEFORE INSERT ON audit_log "
    'WHEN CAST(NEW.entry AS TEXT) LIKE \'%"kind":"deny"%\' BEGIN SELECT RAISE(IGNORE); END'
)
"""A SQLite trigger that drops every deny as it is appended (the INSERT succeeds)."""

REWRITES_DENIES = """
CREATE FUNCTION keep_it_quiet() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.entry := convert_to(replace(convert_from(NEW.entry, 'UTF8'), '"kind":"deny"', '"kind":"allow"'), 'UTF8');
    NEW.leaf_hash := sha256('\\x00'::bytea || NEW.entry);
    RETURN NEW;
END;
$fn$;
CREATE TRIGGER keep_it_quiet BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION keep_it_quiet();
"""
"""A PostgreSQL trigger that turns every deny into an allow as it is appended, leaf hash included."""


def _sqlite_log(db: Path) -> None:
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()


def test_a_sqlite_trigger_that_drops_entries_is_reported(tmp_path: Path) -> None:
    """Review R59: an owner's extra BEFORE INSERT trigger on audit_log (dropping denies) was never reported."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(db)
    raw = sqlite3.connect(db)
    raw.execute(DROPS_DENIES)
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening leaves it
        log.append(DENY)
        assert log.size() == 2  # the deny is gone, and the entries still verify ...
        report = log.verify()
        assert report.entries_verify
        assert not report.ok  # ... but verify names the trigger
        (line,) = report.unprotected
        assert line.startswith("the trigger keep_it_quiet on table audit_log is not one agentgate made")
        assert "`DROP TRIGGER keep_it_quiet` removes it" in line
        log.append(ENTRY)
        with pytest.raises(TamperDetected, match="keep_it_quiet"):
            log.checkpoint()  # nothing signs what it may have written
        assert len(log.checkpoints()) == 1


@pytest.mark.parametrize(
    ("table", "trigger"),
    [
        ("audit_log", "CREATE TRIGGER Mirror AFTER INSERT ON audit_log BEGIN SELECT 1; END"),
        ("audit_checkpoints", "CREATE TRIGGER mirror AFTER INSERT ON AUDIT_CHECKPOINTS BEGIN SELECT 1; END"),
        ("audit_repairs", "CREATE TRIGGER mirror BEFORE INSERT ON audit_repairs BEGIN SELECT 1; END"),
        (
            "agentgate_store_parts",
            "CREATE TRIGGER mirror AFTER UPDATE ON agentgate_store_parts BEGIN SELECT 1; END",
        ),
    ],
)
def test_any_other_sqlite_trigger_on_the_logs_tables_is_reported(
    tmp_path: Path, table: str, trigger: str
) -> None:
    """Review R59: a trigger of another name on any of the log's tables, AFTER ones included, was never reported."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(db)
    raw = sqlite3.connect(db)
    raw.execute(trigger)
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        (line,) = AuditLog(store, KEY, ORIGIN, create=False).unprotected()
    assert line.startswith(f"the trigger {trigger.split()[2]} on table {table} is not one agentgate made")


def test_agentgates_own_sqlite_triggers_are_not_foreign(tmp_path: Path) -> None:
    """Review R59: agentgate's triggers, its index's included and in upper case, are not reported as another's."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(db)
    raw = sqlite3.connect(db)
    (made,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'audit_log_no_update'").fetchone()
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.execute(made.replace("audit_log_no_update", "AUDIT_LOG_NO_UPDATE"))
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        assert AuditLog(store, KEY, ORIGIN, create=False).unprotected() == ()


@pytest.mark.postgres
def test_a_postgresql_trigger_that_rewrites_entries_is_reported(postgres_url: str) -> None:
    """Review R59: an owner's BEFORE INSERT trigger rewriting each deny (leaf hash too) was never reported."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(REWRITES_DENIES)  # type: ignore[arg-type]
        conn.execute(
            'CREATE TRIGGER "Mirror" AFTER INSERT ON audit_checkpoints FOR EACH STATEMENT '
            "EXECUTE FUNCTION keep_it_quiet()"
        )
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening leaves them
        log.append(DENY)
        assert b'"kind":"allow"' in log.entry_bytes(2)  # rewritten as it was appended ...
        report = log.verify()
        assert report.entries_verify  # ... and it verifies ...
        assert [line.split(": it runs")[0] for line in report.unprotected] == [  # ... but verify names them
            'the trigger "Mirror" on table audit_checkpoints is not one agentgate made',
            "the trigger keep_it_quiet on table audit_log is not one agentgate made",
        ]
        assert (
            "`DROP TRIGGER keep_it_quiet ON audit_log` run as the table's owner removes it"
            in report.unprotected[1]
        )
        with pytest.raises(TamperDetected, match="Mirror"):
            log.checkpoint()
        assert len(log.checkpoints()) == 1
