"""The library signs no checkpoint over a log whose protection trigger is not in force.

Until review R57 ``agentgate audit checkpoint`` and ``audit prove`` refused to sign over such a log,
but the library did not: ``AuditLog.checkpoint()`` and ``Gate.verify()`` (which signs a checkpoint
first) signed the entries appended or edited while a trigger was dropped, changed or disabled after
the log was opened. Rules checked here: where a new checkpoint would be signed, both raise
``TamperDetected`` naming the first such trigger in ``audit verify``'s words and sign nothing;
a log that has not grown gets its stored checkpoint back (nothing is signed); ``check_extends``
refuses where ``checkpoint`` would.

And a protection trigger put back by a writer's opening leaves evidence. Until review R57 an
attacker with DDL rights could drop ``audit_log_no_update``, rewrite an entry appended since the
last checkpoint (and its leaf hash), and let the application restart: its opening put the trigger
back without a word, the next checkpoint signed the forged entry, and ``audit verify`` said intact.
Rules checked here: the repair is a row of the append-only ``audit_repairs``, written as the
trigger is put back, and a warning on ``agentgate.audit``; ``verify`` reports it (TAMPERED, naming
the entries after the checkpoint stored then, up to the log's size then) and every checkpoint is
refused until ``audit accept-repair`` records who checked them and why, after which ``verify``
prints a ``note:`` line and exits 0; a store made before the table opens and records no repair.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_gate import Setup

from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.audit._schema import accept_repair

KEY = SigningKey(b"\x09" * 32)
ORIGIN = "repairs.example/audit"


def _postgres(url: str) -> Store:
    from agentgate.store._postgres import PostgresStore

    return PostgresStore(url)


def accept_repairs(store: Store) -> list[str]:
    """Accept every repair of ``store``'s log not accepted yet (as an operator would, once the
    entries were checked against an outside copy); returns what each repair says, in order."""
    rows = store.query(
        "SELECT id, what FROM audit_repairs r WHERE accepts IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM audit_repairs a WHERE a.accepts = r.id) ORDER BY id"
    )
    for rid, _what in rows:
        accept_repair(store, int(rid), "the test", "checked against the copy kept outside")
    return [str(what) for _rid, what in rows]


DROPPED = "the protection trigger audit_log_no_update on table audit_log is missing"
ENTRY = {"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"}


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[AuditLog]:
    """A log of three entries and a checkpoint over them, opened to write."""
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()
        yield log


def _drop_no_update(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.commit()
    raw.close()


def test_the_library_signs_no_checkpoint_over_a_log_whose_trigger_was_dropped(
    sqlite_log: AuditLog, tmp_path: Path
) -> None:
    """Review R57: AuditLog.checkpoint() signed over a log whose protection trigger was dropped after it opened."""
    _drop_no_update(tmp_path / "agentgate.db")
    sqlite_log.append(ENTRY)
    with pytest.raises(TamperDetected, match=f"audit log: {DROPPED}.*no checkpoint of 4 entries signed"):
        sqlite_log.checkpoint()
    with pytest.raises(TamperDetected, match=DROPPED):
        sqlite_log.check_extends()
    assert len(sqlite_log.checkpoints()) == 1  # nothing signed


def test_a_log_that_has_not_grown_gets_its_stored_checkpoint_back_unsigned(
    sqlite_log: AuditLog, tmp_path: Path
) -> None:
    """Review R57: the refusal covers signing only; the stored checkpoint of an unchanged log is returned as before."""
    stored = sqlite_log.latest_checkpoint()
    _drop_no_update(tmp_path / "agentgate.db")
    assert sqlite_log.checkpoint() == stored
    sqlite_log.check_extends()
    assert len(sqlite_log.checkpoints()) == 1


def test_gate_verify_signs_no_checkpoint_over_a_log_whose_trigger_was_dropped(tmp_path: Path) -> None:
    """Review R57: Gate.verify() signed a checkpoint over a log whose protection trigger was dropped after the gate opened it."""
    setup = Setup(tmp_path)
    try:
        assert setup.gate.verify().ok
        _drop_no_update(tmp_path / "agentgate.db")
        setup.gate.issue(setup.keys["root"], name="lead", key=setup.keys["lead"], role="lead")
        with pytest.raises(TamperDetected, match=DROPPED):
            setup.gate.verify()
        assert len(setup.gate.audit.checkpoints()) == 1
    finally:
        setup.gate.close()


@pytest.mark.postgres
def test_the_library_signs_no_checkpoint_over_a_postgresql_log_whose_trigger_was_disabled(
    postgres_url: str,
) -> None:
    """Review R57: AuditLog.checkpoint() signed over a PostgreSQL log whose protection trigger was disabled after it opened."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        log.append(ENTRY)
        with pytest.raises(
            TamperDetected,
            match="the protection trigger audit_log_append_only on table audit_log is disabled",
        ):
            log.checkpoint()
        assert len(log.checkpoints()) == 1


# --- a repair leaves evidence ----------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's store ``tmp_path/agentgate.db`` (its log key beside it) and origin."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    return tmp_path / "agentgate.db"


def _run(argv: list[str]) -> int:
    from agentgate.cli.main import main

    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _forge_after_dropping_the_trigger(db: Path) -> None:
    """The attack: entries 0-2 checkpointed, 3-4 not; the trigger refusing an edit dropped, and
    entry 4 rewritten with its leaf hash recomputed (so that a new checkpoint would sign it)."""
    from agentgate.audit.merkle import leaf_hash

    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()
        log.append_many([ENTRY] * 2)
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    forged = bytes(raw.execute("SELECT entry FROM audit_log WHERE idx = 4").fetchone()[0]).replace(
        b"did:key:zA", b"did:key:zB"
    )
    raw.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    raw.commit()
    raw.close()


def test_a_trigger_put_back_by_a_writer_is_recorded_reported_and_refused_until_accepted(
    cli: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Review R57: a writer's opening put a dropped protection trigger back without a trace, and the next checkpoint signed the forged entry."""
    _forge_after_dropping_the_trigger(cli)
    with caplog.at_level("WARNING", logger="agentgate.audit"), SQLiteStore(cli) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)  # the application restarts: a writer's opening
        assert log.unprotected() and "repair 1 at " in log.unprotected()[0]
        with pytest.raises(TamperDetected, match=r"repair 1 at .*entries 3 to 4 were appended"):
            log.checkpoint()
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "agentgate.audit"]
    assert "audit_log_no_update on table audit_log was missing and was put back (repair 1)" in warning
    assert "entries 3 to 4" in warning
    capsys.readouterr()
    assert _run(["audit", "checkpoint"]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: repair 1 at ")
    assert _run(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 1 problem(s)\n")
    assert (
        "the protection trigger audit_log_no_update on table audit_log was missing, and a writer's opening "
        "of the log put it back: entries 3 to 4 were appended after the checkpoint stored last then" in out
    )
    assert "`agentgate audit accept-repair 1 --by NAME --reason TEXT`" in out
    with SQLiteStore(cli) as store:  # the record is append-only
        with pytest.raises(Exception, match="append-only"), store.transaction() as tx:
            tx.execute("DELETE FROM audit_repairs")
        assert (
            len(AuditLog(store, open_log_key(store), ORIGIN).checkpoints()) == 1
        )  # nothing signed, no second record
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 1
    assert _run(["audit", "accept-repair", "1", "--by", "Ana", "--reason", "entries 3-4 match the SIEM"]) == 0
    assert capsys.readouterr().out.startswith(
        "accepted: repair 1 (the protection trigger audit_log_no_update"
    )
    # A refusal of well-formed input: exit 1, REFUSED on standard output (exit 2 until review R59).
    assert _run(["audit", "accept-repair", "1", "--by", "Ana", "--reason", "again"]) == 1
    assert capsys.readouterr().out == "REFUSED: repair 1 was accepted already\n"
    assert _run(["audit", "verify"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("intact: 5 entries")
    assert lines[1].startswith(
        "note: repair 1 (the protection trigger audit_log_no_update on table audit_log"
    )
    assert " was accepted by Ana at " in lines[1]
    assert "entries 3 to 4 unprotected" in lines[1] and lines[1].endswith(": entries 3-4 match the SIEM")
    assert _run(["audit", "checkpoint"]) == 0


def test_accept_repair_refuses_an_id_of_no_repair(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R57: accept-repair (new) names an id of no repair and writes nothing (a refusal, exit 1, since review R59)."""
    _forge_after_dropping_the_trigger(cli)
    capsys.readouterr()
    assert _run(["audit", "accept-repair", "7", "--by", "Ana", "--reason", "x"]) == 1
    assert capsys.readouterr().out == "REFUSED: audit_repairs holds no repair 7\n"
    assert _run(["audit", "accept-repair", "0", "--by", "Ana", "--reason", "x"]) == 2  # no repair id


def as_made_before_the_record_of_repairs(db: Path) -> None:
    """Make the SQLite store ``db`` as an earlier release left it: no ``audit_repairs`` (its
    triggers go with it) and no row of ``agentgate_store_parts`` recording it (that record's own
    triggers set aside for the deletion, then made again as they were)."""
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE audit_repairs")
    triggers = raw.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'agentgate_store_parts'"
    ).fetchall()
    for name, _sql in triggers:
        raw.execute(f'DROP TRIGGER "{name}"')
    raw.execute("DELETE FROM agentgate_store_parts WHERE part = 'audit_repairs'")
    for _name, sql in triggers:
        raw.execute(sql)
    raw.commit()
    raw.close()


def test_a_store_made_before_the_record_of_repairs_opens_and_records_none(tmp_path: Path) -> None:
    """Review R57: a log made by an earlier release (no audit_repairs) opens; a writer makes the table and records no repair."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, KEY, ORIGIN).append_many([ENTRY] * 2)
    as_made_before_the_record_of_repairs(db)
    with SQLiteStore(db) as store:
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 0
        assert log.verify().ok
        log.checkpoint()


@pytest.mark.postgres
def test_a_postgresql_trigger_put_back_by_a_writer_is_recorded_until_accepted(postgres_url: str) -> None:
    """Review R57: a PostgreSQL writer's opening put a dropped protection trigger back without a trace."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        log.append(ENTRY)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER audit_log_append_only ON audit_log")
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        (line,) = log.unprotected()
        assert line.startswith("repair 1 at ")
        assert "audit_log_append_only on table audit_log was missing" in line and "entries 2 to 2" in line
        log.append(ENTRY)
        with pytest.raises(TamperDetected, match="repair 1"):
            log.checkpoint()
        with (
            psycopg.connect(postgres_url, autocommit=True) as conn,
            pytest.raises(psycopg.errors.RaiseException),
        ):
            conn.execute("DELETE FROM audit_repairs")
        assert accept_repairs(store) == [
            "the protection trigger audit_log_append_only on table audit_log was missing"
        ]
        assert log.verify().ok and len(log.verify().accepted_repairs) == 1
        log.checkpoint()
