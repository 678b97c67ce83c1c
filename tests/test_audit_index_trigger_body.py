"""``audit verify`` compares the reference index's trigger (``audit_log_index_ref``) with the one
agentgate makes, as it compares the protection triggers, where the index was built.

Until review R57 only its presence was looked for: made again with a body that does nothing (on
SQLite ``CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log BEGIN SELECT 1; END``, on
PostgreSQL its function replaced by one that returns NULL, or the trigger made under ``WHEN
(false)``), it passed as in force while new entries went unindexed, and ``explain`` read the
incomplete index. Rules checked here: such a trigger is reported as "not the one agentgate made"
(TAMPERED), read from the catalog only; a log opened to read does not read the index; a writer's
opening makes it again and indexes the entries appended meanwhile.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_audit_read_only import ORIGIN, _catalog, _postgres

from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x09" * 32)
CHANGED = (
    "the trigger audit_log_index_ref on table audit_log is not the one agentgate made: {how}: the "
    "reference index audit_refs is no longer kept for new entries (audit explain reads the whole log "
    "instead); `agentgate store init` run as the store's owner makes it again"
)
SQLITE_CHANGED = CHANGED.format(how="its definition in sqlite_master is not the one agentgate runs")


def _allow_then_outcome(store: Store, change: list[str]) -> int:
    """A log whose entry 1 (an outcome of entry 0) is appended after ``change`` ran; entry 0's index."""
    log = AuditLog(store, KEY, ORIGIN)
    first = log.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"})
    with store.transaction() as tx:
        for statement in change:
            tx.execute(statement)
    log.append({"kind": "outcome", "principal": "did:key:zA", "ref": first, "status": "ok"})
    return first


def _reported_then_made_again(store: Store, first: int, reported: str) -> None:
    reader = AuditLog(store, KEY.public, ORIGIN, create=False)
    report = reader.verify()
    assert report.entries_verify and not report.ok
    assert report.unprotected[0].startswith(reported)
    explained = reader.explain(first)  # the index is not read: the log is
    assert not explained.indexed and [e.index for e in explained.related] == [1]
    writer = AuditLog(store, KEY, ORIGIN)
    assert writer.verify().ok, (writer.verify().problems, writer.verify().unprotected)
    later = writer.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"})
    writer.append({"kind": "outcome", "principal": "did:key:zA", "ref": later, "status": "ok"})
    assert sorted(tuple(map(int, row)) for row in store.query("SELECT idx, ref FROM audit_refs")) == [
        (1, first),
        (3, later),
    ]
    assert writer.explain(first).indexed


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log BEGIN SELECT 1; END",
        "CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log WHEN 0 "
        "BEGIN INSERT OR REPLACE INTO audit_refs (idx, ref) "
        "VALUES (NEW.idx, json_extract(CAST(NEW.entry AS TEXT), '$.ref')); END",
    ],
    ids=["body-does-nothing", "when-never"],
)
def test_a_sqlite_index_trigger_made_again_otherwise_is_reported_and_a_writer_makes_it_again(
    tmp_path: Path, ddl: str
) -> None:
    """Review R57: audit_log_index_ref made again with a body that does nothing passed verify, and new entries went unindexed."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        first = _allow_then_outcome(store, ["DROP TRIGGER audit_log_index_ref", ddl])
        assert store.query("SELECT idx FROM audit_refs") == []  # the outcome went unindexed
    before = db.read_bytes()
    with SQLiteStore(db) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert db.read_bytes() == before  # verify wrote nothing
    assert SQLITE_CHANGED in report.unprotected
    with SQLiteStore(db) as store:
        _reported_then_made_again(store, first, SQLITE_CHANGED)


def test_a_sqlite_index_trigger_written_with_other_whitespace_and_case_is_agentgates(tmp_path: Path) -> None:
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, KEY, ORIGIN)
    raw = sqlite3.connect(db)
    made = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'audit_log_index_ref'").fetchone()[0]
    raw.execute("DROP TRIGGER audit_log_index_ref")
    raw.execute(
        "\n  ".join(made.split()).replace("CREATE TRIGGER", "create trigger").replace("BEGIN", "Begin")
    )
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        reader = AuditLog(store, KEY.public, ORIGIN, create=False)
        assert reader.verify().ok and reader.refs_indexed


def test_a_sqlite_index_trigger_whose_literals_changed_case_is_not_agentgates(tmp_path: Path) -> None:
    """Review R81: the text was compared with letters lowered throughout, string literals too:
    the trigger made again reading ``'$.REF'`` where agentgate's reads ``'$.ref'`` (another JSON
    path: nothing is indexed) passed as agentgate's, and a writer's opening left it; with
    ``json_extract(..., '$.REF')`` every later entry that refers to another failed to append. A
    literal is compared as written; the rest of the text still case-blind (the test above)."""
    from agentgate.store.audit._schema import _sqlite_made

    made = _sqlite_made()["audit_log_index_ref"]
    changed = made.replace("'$.ref'", "'$.REF'")
    assert changed != made
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        first = _allow_then_outcome(store, ["DROP TRIGGER audit_log_index_ref", changed])
        assert store.query("SELECT idx FROM audit_refs") == []  # the outcome went unindexed
    with SQLiteStore(db) as store:
        _reported_then_made_again(store, first, SQLITE_CHANGED)


# --- PostgreSQL ------------------------------------------------------------------------------------

PG_CHANGES: dict[str, tuple[list[str], str]] = {
    "function": (
        [
            "CREATE OR REPLACE FUNCTION agentgate_audit_index_ref() RETURNS trigger LANGUAGE plpgsql "
            "SECURITY DEFINER AS $fn$ BEGIN RETURN NULL; END; $fn$"
        ],
        "the trigger audit_log_index_ref on table audit_log is not the one agentgate made: its function "
        "public.agentgate_audit_index_ref() is not the one agentgate made",
    ),
    "when": (
        [
            "DROP TRIGGER audit_log_index_ref ON audit_log",
            "CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log "
            "FOR EACH ROW WHEN (false) EXECUTE FUNCTION agentgate_audit_index_ref()",
        ],
        "the trigger audit_log_index_ref on table audit_log is not the one agentgate made: it fires otherwise",
    ),
    "statement": (
        [
            "DROP TRIGGER audit_log_index_ref ON audit_log",
            "CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log "
            "FOR EACH STATEMENT EXECUTE FUNCTION agentgate_audit_index_ref()",
        ],
        "the trigger audit_log_index_ref on table audit_log is not the one agentgate made: it fires otherwise",
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("change", sorted(PG_CHANGES))
def test_a_postgresql_index_trigger_made_again_otherwise_is_reported_and_a_writer_makes_it_again(
    postgres_url: str, change: str
) -> None:
    """Review R57: audit_log_index_ref whose function returns NULL, or made again under WHEN (false), passed verify as in force."""
    sql, reported = PG_CHANGES[change]
    with _postgres(postgres_url) as store:
        first = _allow_then_outcome(store, sql)
        assert store.query("SELECT idx FROM audit_refs") == []  # the outcome went unindexed
    before = _catalog(postgres_url)
    with _postgres(postgres_url) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert _catalog(postgres_url) == before  # verify wrote nothing
    assert next(line for line in report.unprotected if "audit_log_index_ref" in line).startswith(reported)
    with _postgres(postgres_url) as store:
        _reported_then_made_again(store, first, reported)


@pytest.mark.postgres
def test_a_postgresql_index_function_with_another_search_path_is_reported(postgres_url: str) -> None:
    """Its search path names the schema of audit_refs: another one would write another table."""
    with _postgres(postgres_url) as store:
        AuditLog(store, KEY, ORIGIN)
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute('ALTER FUNCTION agentgate_audit_index_ref() SET search_path = "$user", public')
    with _postgres(postgres_url) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
        assert report.unprotected[0].startswith(PG_CHANGES["function"][1])
        AuditLog(store, KEY, ORIGIN)
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
