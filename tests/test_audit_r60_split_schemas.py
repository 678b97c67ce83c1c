"""A writer's opening refuses, naming each schema, a log whose tables were split across schemas.

Until review R60 a PostgreSQL log one of whose tables was moved into another schema on the search
path by hand (``ALTER TABLE audit_checkpoints SET SCHEMA other``) failed to open for writing with
PostgreSQL's own words, naming no schema: ``relation "audit_checkpoints" does not exist`` (the
table is there), or ``function agentgate_append_only() does not exist``. Rules checked here: the
opening refuses with a ``StoreError`` naming each table's schema and the ``ALTER TABLE ... SET
SCHEMA`` that puts it back, changes nothing (no repair is recorded), and once the table is moved
back the log opens, appends and verifies with nothing to report.
"""

from __future__ import annotations

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import _database, _repairs

from agentgate.errors import StoreError
from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(
    "moved", ["audit_log", "audit_checkpoints", "audit_repairs", "agentgate_store_parts"]
)
def test_a_log_whose_table_was_moved_to_another_schema_is_refused_by_name(
    postgres_url: str, moved: str
) -> None:
    """Review R60: log tables split across schemas by hand failed to open with an error that named no schema."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA other")
        conn.execute(f"ALTER TABLE {moved} SET SCHEMA other")  # type: ignore[arg-type]
        conn.execute(f"ALTER DATABASE {_database(postgres_url)} SET search_path = public, other")  # type: ignore[arg-type]
    with _postgres(postgres_url) as store, pytest.raises(StoreError) as refused:
        AuditLog(store, KEY, ORIGIN)
    said = str(refused.value)
    assert said.startswith("the audit log's tables are not in one schema (")
    assert f"{moved} in other" in said and said.count(" in public") == 3  # the other three
    assert f"`ALTER TABLE other.{moved} SET SCHEMA public` as their owner" in said
    assert _repairs(postgres_url) == []  # nothing changed
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the fix the error names
        conn.execute(f"ALTER TABLE other.{moved} SET SCHEMA public")  # type: ignore[arg-type]
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert log.append(ENTRY) == 2
        assert log.verify().ok
    assert _repairs(postgres_url) == []
