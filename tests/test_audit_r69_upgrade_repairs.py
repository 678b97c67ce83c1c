"""A protection trigger that a later release added is added by an upgrade, not repaired.

``audit_checkpoints_no_replace`` (SQLite) came with commit b10e47b3 (2026-11-29 21:00), after the
log's tables and their other protection triggers: a log made before it has no such trigger, and
no one dropped it. Until review R69 a writer's opening of such a log (step 2 of docs/operations.md,
Upgrading: ``agentgate store init``) recorded it as ``repair 1: ... was missing``, so step 4
(``audit verify``) said TAMPERED (exit 1) and every checkpoint was refused until someone accepted
a repair of what was never broken. Rules checked here, on a store replayed from the schema an
earlier release made (``tests/schema/earlier/``): where the store holds no table that a release
with the trigger made with the log (``audit_refs``, ``agentgate_store_parts``, ``audit_repairs``),
the trigger is recorded as added by an upgrade: ``verify`` prints a ``note:`` line and exits 0,
checkpoints are signed, ``accept-repair`` refuses its row; where one of them is there, the missing
trigger was dropped and is a repair as before (TAMPERED until accepted), and so is a trigger
dropped after the upgrade. PostgreSQL's protection triggers all came with the log's tables: an
upgrade there records nothing.
"""

from __future__ import annotations

import io
import sqlite3
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import open_store
from agentgate.store.audit import REFS_DDL, AuditLog, open_log_key

EARLIER = Path(__file__).parent / "schema" / "earlier"
KEY = SigningKey(b"\x69" * 32)
ORIGIN = "upgrade.example/audit"
ENTRY = {"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"}
ADDED = (
    "the protection trigger audit_checkpoints_no_replace on table audit_checkpoints was added by an upgrade"
)
NO_REPLACE = (
    "CREATE TRIGGER audit_checkpoints_no_replace BEFORE INSERT ON audit_checkpoints\n"
    "WHEN NEW.id IN (SELECT id FROM audit_checkpoints)\n"
    "BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;\n"
)


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _earlier(tmp_path: Path, postgres: Any, dialect: str, commit: str, then: str = "") -> str:
    """A store holding the schema ``commit`` made, then ``then`` (statements); its URL. Not opened
    by this code."""
    script = (EARLIER / f"{commit}.{dialect}.sql").read_text()
    if dialect == "sqlite":
        url = str(tmp_path / "agentgate.db")
        conn = sqlite3.connect(url)
        conn.executescript(script + then)
        conn.close()
        return url
    url = str(postgres.create_database())
    for statements in (script, then):  # pg_dump's script empties the session's search_path
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(statements or "SELECT 1")
    return url


def _store_init(url: str) -> None:
    with redirect_stdout(io.StringIO()):
        assert _run(["store", "init", "--store", url]) == 0


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)


def test_a_sqlite_log_made_before_a_protection_trigger_is_upgraded_without_a_repair(
    tmp_path: Path, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: ``store init`` of a store made by 896aa7a8 (before audit_checkpoints_no_replace)
    recorded ``repair 1 ... was missing``, and ``audit verify`` then said TAMPERED, exit 1, and
    ``audit checkpoint`` REFUSED, until ``accept-repair`` of a protection that release never made."""
    url = _earlier(tmp_path, None, "sqlite", "896aa7a8")
    _store_init(url)
    with open_store(url) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        assert log.unprotected() == ()
        log.append_many([ENTRY] * 2)
    assert _run(["audit", "checkpoint", "--store", url]) == 0
    capsys.readouterr()
    assert _run(["audit", "verify", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("intact: 2 entries")
    assert lines[1].startswith(f"note: {ADDED} at ")
    assert ", when the log held 0 entries: the log was made by a release before the trigger" in lines[1]
    assert len(lines) == 2
    assert _run(["audit", "accept-repair", "1", "--by", "Ana", "--reason", "x", "--store", url]) == 1
    assert capsys.readouterr().out.startswith(f"REFUSED: audit_repairs row 1 is no repair: {ADDED}")
    with open_store(url) as store:  # the trigger is there, and refuses what it is for
        with pytest.raises(Exception, match="append-only"), store.transaction() as tx:
            tx.execute(
                "INSERT OR REPLACE INTO audit_checkpoints (id, size, root, note, created) "
                "SELECT id, size, root, note, created FROM audit_checkpoints"
            )
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 1


@pytest.mark.parametrize(
    ("commit", "then"),
    [
        # A log of a release with audit_refs (2026-11-30) and no record of the log: the mark is
        # the reference index, made in the opening that made the trigger.
        ("896aa7a8", NO_REPLACE + REFS_DDL["sqlite"]),
        # A log of schema version 1 (2026-12-05): every mark is there.
        ("ca7a6bb2", ""),
    ],
)
def test_a_sqlite_trigger_dropped_from_a_log_of_a_release_that_made_it_is_a_repair(
    tmp_path: Path, commit: str, then: str
) -> None:
    """Review R69: only a log with no mark of a release that made the trigger is upgraded without a
    repair; where one is there, the trigger missing was dropped, and stays a repair."""
    url = _earlier(tmp_path, None, "sqlite", commit, then + "DROP TRIGGER audit_checkpoints_no_replace;")
    _store_init(url)
    with open_store(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        (line,) = log.unprotected()
        assert line.startswith("repair 1 at ")
        assert "audit_checkpoints_no_replace on table audit_checkpoints was missing" in line
        assert log.verify().added_on_upgrade == ()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_trigger_dropped_after_the_upgrade_is_a_repair(
    tmp_path: Path, request: pytest.FixtureRequest, dialect: str
) -> None:
    """Review R69: the upgrade that adds the trigger leaves the marks, so a drop after it is
    recorded and reported as a repair as before (on PostgreSQL the upgrade adds nothing)."""
    postgres = request.getfixturevalue("postgres_server") if dialect == "postgresql" else None
    url = _earlier(tmp_path, postgres, dialect, "896aa7a8")
    _store_init(url)
    with open_store(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        log.append(ENTRY)
        report = log.verify()
        assert report.ok and report.unprotected == ()
        added = [line.startswith(f"{ADDED} at ") for line in report.added_on_upgrade]
        assert added == ([True] if dialect == "sqlite" else [])
    trigger, table = (
        ("audit_checkpoints_no_replace", "audit_checkpoints")
        if dialect == "sqlite"
        else ("audit_log_append_only", "audit_log")
    )
    if dialect == "sqlite":
        raw = sqlite3.connect(url)
        raw.execute(f"DROP TRIGGER {trigger}")
        raw.commit()
        raw.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(f"DROP TRIGGER {trigger} ON {table}")
    with open_store(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        (line,) = log.unprotected()
        assert f"{trigger} on table {table} was missing" in line and "entries 2 to 2" in line
        assert not log.verify().ok


@pytest.mark.postgres
@pytest.mark.parametrize("commit", ["896aa7a8", "ca7a6bb2"])
def test_a_postgresql_log_of_an_earlier_release_is_upgraded_without_a_repair_or_a_note(
    tmp_path: Path, postgres_server: Any, commit: str
) -> None:
    """Review R69: every PostgreSQL protection trigger of the log's tables came with them, so an
    upgrade of a log of an earlier release records nothing in audit_repairs and verifies intact."""
    url = _earlier(tmp_path, postgres_server, "postgresql", commit)
    _store_init(url)
    with open_store(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append(ENTRY)
        log.checkpoint()
        report = log.verify()
        assert report.ok and report.unprotected == () and report.added_on_upgrade == ()
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 0


def test_verify_of_a_log_made_before_a_protection_trigger_says_so_before_the_upgrade(
    tmp_path: Path, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: ``audit verify`` (which writes nothing) of a SQLite log made before
    audit_checkpoints_no_replace, not yet upgraded, said the trigger is missing because "someone
    with DDL rights on the store changed it": no one did. It is still not in force (exit 1), and
    the line says what is known: made before the trigger, or dropped, and ``store init`` adds it."""
    url = _earlier(tmp_path, None, "sqlite", "896aa7a8")
    assert _run(["audit", "verify", "--store", url, "--key", KEY.public.did]) == 1
    out = capsys.readouterr().out
    assert (
        "the protection trigger audit_checkpoints_no_replace on table audit_checkpoints is missing: "
        "the log holds none of the tables a release that made the trigger makes with it (audit_refs, "
        "agentgate_store_parts, audit_repairs), so it was made before the trigger (2026-11-29) and "
        "never had it, or someone with DDL rights on the store dropped it and those tables; it is not "
        "protected against a checkpoint's replacement; `agentgate store init` run as the store's "
        "owner adds it (docs/operations.md, Upgrading)" in out
    )
    assert "changed it" not in out
