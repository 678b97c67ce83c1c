"""Another application's table named ``audit_repairs`` is refused as a store opens, like one named
after any other table of agentgate's (real SQLite files and the session's PostgreSQL server)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from _raw_sqlite import opened

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore

FOREIGN = "CREATE TABLE audit_repairs (x INTEGER); INSERT INTO audit_repairs VALUES (1);"


def test_a_foreign_audit_repairs_table_is_refused_at_open_on_sqlite(tmp_path: Path) -> None:
    """Review R68: ``required_store_columns`` left ``audit_repairs`` (``REPAIRS_DDL``) out, so a
    store holding another application's table of that name opened (a foreign ``audit_log`` was
    refused at open since review R44), and only the audit log's creation noticed it later."""
    path = tmp_path / "other.db"
    with opened(path) as db:
        db.executescript(FOREIGN)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"audit_repairs.*not agentgate's"):
        SQLiteStore(path)
    assert path.read_bytes() == before


@pytest.mark.postgres
def test_a_foreign_audit_repairs_table_is_refused_at_open_on_postgresql(postgres_url: str) -> None:
    """Review R68: as on SQLite."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE audit_repairs (x INTEGER)")
    with pytest.raises(StoreError, match=r"audit_repairs.*not agentgate's"):
        PostgresStore(postgres_url).close()
