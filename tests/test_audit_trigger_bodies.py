"""``audit verify`` reads the protection triggers' definitions, not only their names.

Until review R56 a protection trigger with agentgate's name but another body passed as in force:
on SQLite ``DROP TRIGGER audit_log_no_update; CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON
audit_log BEGIN SELECT 1; END``, on PostgreSQL ``CREATE OR REPLACE FUNCTION
agentgate_append_only() ... RETURN NEW`` or the trigger made again FOR EACH STATEMENT, and entries
could then be edited while verify said intact. Rules checked here: such a trigger is reported as
"not the one agentgate made" (TAMPERED, exit 1), read from the catalog only; a trigger that
differs from agentgate's only in whitespace and letter case is not; a writer's opening makes the
changed trigger (and function) again, after which an edit is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_audit_r57_repairs import accept_repairs
from test_audit_read_only import ORIGIN, _catalog, _files, _postgres, _run

from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x07" * 32)
NO_OP = "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT 1; END"


def _sqlite_log(db: Path, *ddl: str) -> None:
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([{"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"}] * 3)
        log.checkpoint()
    raw = sqlite3.connect(db)
    for sql in ddl:
        raw.execute(sql)
    raw.commit()
    raw.close()


def _edit(connection: sqlite3.Connection | psycopg.Connection[tuple[object, ...]]) -> None:
    connection.execute("UPDATE audit_log SET entry = entry WHERE idx = 1")


def test_a_sqlite_trigger_whose_body_does_nothing_is_reported_and_store_init_makes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: a SQLite protection trigger made again with a body that does nothing passed verify as in force."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(db, "DROP TRIGGER audit_log_no_update", NO_OP)
    raw = sqlite3.connect(db)
    _edit(raw)  # the trigger refuses nothing
    raw.rollback()
    raw.close()
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    (tmp_path / "log.pub").write_text(KEY.public.did + "\n")
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    before = _files(tmp_path)
    capsys.readouterr()
    assert _run(["audit", "verify", "--key", KEY.public.did]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 1 problem(s)\n")
    assert (
        "the protection trigger audit_log_no_update on table audit_log is not the one agentgate made: "
        "its definition in sqlite_master is not the one agentgate runs: the log is no longer protected "
        "against an entry's edit" in out
    )
    assert "`agentgate store init` run as the store's owner makes it again" in out
    assert _files(tmp_path) == before  # verify wrote nothing
    assert _run(["store", "init", "--store", str(db)]) == 0
    capsys.readouterr()
    with SQLiteStore(db) as store:  # the repair is reported until accepted (review R57)
        assert accept_repairs(store) == [
            "the protection trigger audit_log_no_update on table audit_log was not the one agentgate made"
        ]
    assert _run(["audit", "verify", "--key", KEY.public.did]) == 0
    raw = sqlite3.connect(db)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        _edit(raw)
    raw.close()


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TRIGGER audit_log_next_index BEFORE INSERT ON audit_log "
        "WHEN NEW.idx IS NOT (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log) BEGIN SELECT 1; END",
        "CREATE TRIGGER audit_log_next_index AFTER INSERT ON audit_log "
        "WHEN NEW.idx IS NOT (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log) "
        "BEGIN SELECT RAISE(ABORT, 'audit_log: index must be the next one'); END",
        "CREATE TRIGGER audit_log_next_index BEFORE INSERT ON audit_log WHEN 0 "
        "BEGIN SELECT RAISE(ABORT, 'audit_log: index must be the next one'); END",
    ],
)
def test_each_change_of_a_sqlite_trigger_is_reported(tmp_path: Path, ddl: str) -> None:
    """Review R56: a SQLite protection trigger made again with another body, timing or WHEN clause passed as in force."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(db, "DROP TRIGGER audit_log_next_index", ddl)
    with SQLiteStore(db) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert report.entries_verify and not report.ok
    assert [line.split(":")[0] for line in report.unprotected] == [
        "the protection trigger audit_log_next_index on table audit_log is not the one agentgate made"
    ]


@pytest.mark.parametrize(
    ("message", "agentgates"), [("audit_log is append-only", True), ("AUDIT_LOG IS APPEND-ONLY", False)]
)
def test_a_sqlite_trigger_written_with_other_whitespace_and_case_is_agentgates(
    tmp_path: Path, message: str, agentgates: bool
) -> None:
    """Review R56: SQLite keeps a trigger's text as written; whitespace and case alone are no
    change. Since review R81, outside its string literals: a literal is compared as written (in
    the reference index's trigger a JSON path or a type name in capitals is another one, which
    passed as agentgate's: tests/test_audit_index_trigger_body.py)."""
    db = tmp_path / "agentgate.db"
    _sqlite_log(
        db,
        "DROP TRIGGER audit_log_no_update",
        "create trigger audit_log_no_update\n    before update on audit_log\n"
        f"begin   select raise(ABORT, '{message}');\nEND",
    )
    with SQLiteStore(db) as store:
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok is agentgates


# --- PostgreSQL ------------------------------------------------------------------------------------

_RUN_APPEND_ONLY = [
    ("audit_log_append_only", "audit_log"),
    ("audit_log_no_truncate", "audit_log"),
    ("audit_checkpoints_append_only", "audit_checkpoints"),
    ("audit_checkpoints_no_truncate", "audit_checkpoints"),
    ("agentgate_store_parts_append_only", "agentgate_store_parts"),
    ("agentgate_store_parts_no_truncate", "agentgate_store_parts"),
    ("audit_repairs_append_only", "audit_repairs"),
    ("audit_repairs_no_truncate", "audit_repairs"),
]
_REMADE = "DROP TRIGGER audit_log_append_only ON audit_log"
PG_CHANGES: dict[str, tuple[list[str], str]] = {
    "function": (
        [
            "CREATE OR REPLACE FUNCTION agentgate_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            "$fn$ BEGIN RETURN NEW; END; $fn$"
        ],
        "the protection trigger audit_log_append_only on table audit_log is not the one agentgate made: "
        "its function public.agentgate_append_only() is not the one agentgate made",
    ),
    "truncate": (
        [
            _REMADE,
            "CREATE TRIGGER audit_log_append_only BEFORE TRUNCATE ON audit_log "
            "FOR EACH STATEMENT EXECUTE FUNCTION agentgate_append_only()",
        ],
        "the protection trigger audit_log_append_only on table audit_log is not the one agentgate made: "
        "it fires otherwise",
    ),
    "when": (
        [
            _REMADE,
            "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
            "FOR EACH ROW WHEN (false) EXECUTE FUNCTION agentgate_append_only()",
        ],
        "the protection trigger audit_log_append_only on table audit_log is not the one agentgate made: "
        "it fires otherwise",
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("change", sorted(PG_CHANGES))
def test_a_changed_postgresql_trigger_is_reported_and_a_writer_makes_it_again(
    postgres_url: str, change: str
) -> None:
    """Review R56: a PostgreSQL protection trigger whose function returns NEW, or made again on TRUNCATE or under a WHEN, passed as in force."""
    sql, reported = PG_CHANGES[change]
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([{"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"}] * 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for statement in sql:
            conn.execute(statement)  # type: ignore[arg-type]
        _edit(conn)  # the trigger refuses nothing
    before = _catalog(postgres_url)
    with _postgres(postgres_url) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert _catalog(postgres_url) == before  # verify wrote nothing
    # A function changed changes every trigger that runs it.
    named = [f"{name} on table {table}" for name, table in _RUN_APPEND_ONLY] if change == "function" else []
    assert report.entries_verify and report.unprotected[0].startswith(reported)
    assert [line.split(":")[0] for line in report.unprotected[1:]] == [
        f"the protection trigger {where} is not the one agentgate made" for where in named[1:]
    ]
    assert "`agentgate store init` run as the store's owner makes it again" in report.unprotected[0]
    with _postgres(postgres_url) as store:
        AuditLog(store, KEY, ORIGIN)
    with _postgres(postgres_url) as store:  # each one made again is recorded (review R57)
        repaired = accept_repairs(store)
        assert all(what.endswith(" was not the one agentgate made") for what in repaired) and repaired
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
    with psycopg.connect(postgres_url, autocommit=True) as conn, pytest.raises(psycopg.errors.RaiseException):
        _edit(conn)
