"""A writer's opening puts back the record's triggers in the transaction that records their repair.

Until review R59 the triggers of ``agentgate_store_parts`` were recorded as put back (a row of
``audit_repairs``) in one transaction and put back in another, just after: an opening that failed
between the two (a crash, a refused ``CREATE TRIGGER``) left a repair recorded for a trigger that
was still missing, and on SQLite and PostgreSQL a second opening recorded it again. Rules checked
here: the repair and its record commit together, or neither does.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

REFUSES_CREATE_TRIGGER = """
CREATE FUNCTION r59_no_trigger() RETURNS event_trigger LANGUAGE plpgsql AS $fn$
BEGIN RAISE EXCEPTION 'r59: CREATE TRIGGER refused'; END; $fn$;
CREATE EVENT TRIGGER r59_no_trigger ON ddl_command_start WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION r59_no_trigger();
"""
"""An event trigger (a superuser's) that makes every CREATE TRIGGER of the database fail."""

MISSING = (
    "the protection trigger agentgate_store_parts_append_only on table agentgate_store_parts was missing"
)


def _repairs(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(row[0]) for row in conn.execute("SELECT what FROM audit_repairs ORDER BY id")]


@pytest.mark.postgres
def test_a_failed_put_back_of_the_records_trigger_records_no_repair(postgres_url: str) -> None:
    """Review R59: the repair of an agentgate_store_parts trigger was committed before the trigger was put back."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        log.append(ENTRY)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER agentgate_store_parts_append_only ON agentgate_store_parts")
        conn.execute(REFUSES_CREATE_TRIGGER)  # type: ignore[arg-type]
    with _postgres(postgres_url) as store, pytest.raises(StoreError, match="r59: CREATE TRIGGER refused"):
        AuditLog(store, KEY, ORIGIN)  # nothing put back ...
    assert _repairs(postgres_url) == []  # ... so nothing recorded as put back
    with _postgres(postgres_url) as store:
        (line,) = AuditLog(store, KEY, ORIGIN, create=False).unprotected()
    assert "agentgate_store_parts_append_only on table agentgate_store_parts is missing" in line
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP EVENT TRIGGER r59_no_trigger")
    with _postgres(postgres_url) as store:
        (line,) = AuditLog(store, KEY, ORIGIN).unprotected()
    # (id 1 was drawn by the transaction rolled back: an identity does not go back)
    assert line.startswith("repair 2 at ") and MISSING in line and "entries 2 to 2 were appended" in line
    assert _repairs(postgres_url) == [MISSING]


def test_an_opening_stopped_after_the_repair_leaves_the_trigger_with_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: on SQLite too, a repair of an agentgate_store_parts trigger committed without the trigger."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER agentgate_store_parts_no_delete")
    raw.commit()
    raw.close()
    real = SQLiteStore.ensure_schema

    def stopped(self: SQLiteStore, name: str, ddl: Any) -> None:
        if name == "audit_parts":  # the process stops once the log's own transaction committed
            raise StoreError("stopped")
        real(self, name, ddl)

    monkeypatch.setattr(SQLiteStore, "ensure_schema", stopped)
    with SQLiteStore(db) as store:
        (line,) = AuditLog(store, KEY, ORIGIN).unprotected()
        assert line.startswith("repair 1 at ")
        assert "agentgate_store_parts_no_delete on table agentgate_store_parts was missing" in line
    raw = sqlite3.connect(db)
    assert raw.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'agentgate_store_parts_no_delete'"
    ).fetchall()
    raw.close()
