"""The audit verbs that only read write nothing: ``agentgate audit verify``, ``show``, ``explain``,
``report`` and ``prove`` (of an entry a stored checkpoint covers), and ``AuditLog(create=False)``.

Until review R56 opening a log that exists put back what it missed of the log's machinery: a
dropped protection trigger (so that verify hid that someone had dropped it), the reference index
(filled from the entries), the record that the log was made (``agentgate_store_parts``), and the
cache of block roots that ``explain`` and ``prove`` fill. An operator who verifies an evidence
copy must not change it. Rules checked here, for SQLite (the file's bytes) and PostgreSQL (the
catalog: tables, triggers and their state, indexes, functions, and the rows of every audit
table): identical before and after each read verb, on a log missing a protection trigger, the
index or the record; a read that needs the missing index reads the log instead. ``verify`` reports
each protection trigger not in force (exit 1, naming it, its table, what puts it back, and that the
entries still verify); a writer's opening (``agentgate store init``, a Gate, ``audit
checkpoint``) puts it back.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_audit_r57_repairs import accept_repairs

from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

ORIGIN = "readonly.example/audit"
ENTRIES = 1100
"""More than one block of cached roots (1024 leaves), so that explain and prove read the cache."""


def _fill(log: AuditLog) -> None:
    """``ENTRIES`` entries, every third one an outcome referring to the one before, then a checkpoint."""
    log.append_many(
        [
            {"kind": "outcome", "principal": "did:key:zA", "ref": i - 1, "status": "ok"}
            if i % 3 == 2
            else {"kind": "allow", "principal": "did:key:zA", "resource": "tool:search", "budget_delta": i}
            for i in range(ENTRIES)
        ]
    )
    log.checkpoint()


# SQL that damages a log's machinery, per dialect: what an older version left, or someone did.
DAMAGE: dict[str, dict[str, list[str]]] = {
    "trigger": {
        "sqlite": ["DROP TRIGGER audit_log_no_update"],
        "postgresql": ["DROP TRIGGER audit_log_append_only ON audit_log"],
    },
    "index": {
        "sqlite": [
            "DROP TRIGGER audit_log_index_ref",
            "DROP TABLE audit_refs",
            "DROP TABLE audit_refs_built",
            "DROP TABLE audit_nodes",
        ],
        "postgresql": ["DROP TABLE audit_refs, audit_refs_built, audit_nodes"],
    },
    "record": {
        "sqlite": ["DROP TABLE agentgate_store_parts"],
        "postgresql": ["DROP TABLE agentgate_store_parts"],
    },
}


def _read_verbs(tmp_path: Path, key: str) -> list[list[str]]:
    """Every audit verb that only reads, and prove of an entry the stored checkpoint covers."""
    return [
        ["audit", "verify", "--key", key],
        ["audit", "show", "--key", key],
        ["audit", "show", "--json", "--last", "3", "--key", key],
        ["audit", "explain", "1", "--key", key],
        ["audit", "explain", str(ENTRIES - 2), "--key", key],
        ["audit", "report", "--out", str(tmp_path / "report.html"), "--key", key],
        ["audit", "prove", "1030", "--out", str(tmp_path / "proof.txt")],
    ]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)


# --- SQLite: the file's bytes ----------------------------------------------------------------------


def _sqlite_log(tmp_path: Path, damage: str) -> Path:
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        _fill(AuditLog(store, open_log_key(store, create=True), ORIGIN))
    raw = sqlite3.connect(db)
    for sql in DAMAGE[damage]["sqlite"]:
        raw.execute(sql)
    raw.commit()
    raw.close()
    return db


def _files(folder: Path) -> dict[str, str]:
    """Each file in ``folder`` (the store and its -wal, -shm, -journal) by the digest of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.iterdir()
        if p.name.startswith("agentgate.db")
    }


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_read_verbs_leave_the_sqlite_file_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: None, damage: str
) -> None:
    """Review R56: audit verify/show/explain/report/prove rewrote a log they only read (dropped trigger, index, record)."""
    db = _sqlite_log(tmp_path, damage)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    before = _files(tmp_path)
    for argv in _read_verbs(tmp_path, str(tmp_path / "log.pub")):
        code = _run(argv)
        assert code == (1 if damage == "trigger" and argv[1] in ("verify", "report") else 0), argv
        assert _files(tmp_path) == before, argv


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_log_opened_to_read_writes_nothing(tmp_path: Path, damage: str) -> None:
    """Review R56: AuditLog(create=False) put back triggers, the index and the record, and cached block roots."""
    db = _sqlite_log(tmp_path, damage)
    before = _files(tmp_path)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=False).public, ORIGIN, create=False)
        report = log.verify()
        explained = log.explain(ENTRIES - 3)
        proof = log.prove(1030, log.latest_checkpoint())
        assert len(list(log.entries())) == ENTRIES
    assert _files(tmp_path) == before
    assert report.entries_verify and report.size == ENTRIES
    assert [e.index for e in explained.related] == [ENTRIES - 4] and not explained.unproven
    assert explained.indexed == (damage != "index")  # read through the index only where it is whole
    assert proof.index == 1030


# --- what verify says of a trigger not in force ------------------------------------------------------


def test_verify_reports_a_dropped_protection_trigger_and_store_init_puts_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: audit verify put a dropped protection trigger back and said intact, hiding the drop."""
    db = _sqlite_log(tmp_path, "trigger")
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    capsys.readouterr()
    assert _run(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 1 problem(s)\n")
    assert (
        "the protection trigger audit_log_no_update on table audit_log is missing: the log is no longer "
        "protected against an entry's edit" in out
    )
    assert "`agentgate store init` run as the store's owner puts it back" in out
    assert f"the entries verify: {ENTRIES} entries" in out and "first bad index" not in out
    assert _run(["audit", "verify"]) == 1  # still missing: verify put nothing back
    capsys.readouterr()
    assert _run(["store", "init", "--store", str(db)]) == 0
    capsys.readouterr()
    # The trigger is back, and its repair is reported until accepted (review R57).
    assert _run(["audit", "verify"]) == 1
    assert "a writer's opening of the log put it back" in capsys.readouterr().out
    with SQLiteStore(db) as store:
        assert accept_repairs(store) == [
            "the protection trigger audit_log_no_update on table audit_log was missing"
        ]
    assert _run(["audit", "verify"]) == 0
    assert capsys.readouterr().out.startswith(f"intact: {ENTRIES} entries")


def test_verify_names_an_edit_made_while_the_trigger_was_dropped_besides_the_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: with the trigger reported, an edited entry is still named (and the entries do not verify)."""
    db = _sqlite_log(tmp_path, "trigger")
    raw = sqlite3.connect(db)
    raw.execute("UPDATE audit_log SET entry = replace(entry, 'allow', 'deny!') WHERE idx = 4")
    raw.commit()
    raw.close()
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    capsys.readouterr()
    assert _run(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 3 problem(s)\nfirst bad index: 4\n")
    assert "entry 4: bytes do not match the stored leaf hash" in out
    assert "audit_log_no_update" in out and "the entries verify" not in out


def _index_trigger_dropped_between_two_entries(db: Path, key: SigningKey) -> int:
    """A log whose entry 1 (an outcome of entry 0) was appended after audit_log_index_ref was
    dropped (by a writer open since before the drop); entry 0's index."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, key, ORIGIN)
        first = log.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"})
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER audit_log_index_ref")
        log.append({"kind": "outcome", "principal": "did:key:zA", "ref": first, "status": "ok"})
    return first


def test_a_dropped_index_trigger_is_reported_and_explain_reads_the_log(tmp_path: Path) -> None:
    """Review R56: a log opened to read put audit_log_index_ref back instead of reporting it."""
    key = SigningKey(b"\x05" * 32)
    first = _index_trigger_dropped_between_two_entries(tmp_path / "agentgate.db", key)
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        reader = AuditLog(store, key.public, ORIGIN, create=False)
        report = reader.verify()
        assert report.entries_verify and not report.ok
        assert report.unprotected == (
            "the trigger audit_log_index_ref on table audit_log is missing: the reference index "
            "audit_refs is no longer kept for new entries (audit explain reads the whole log "
            "instead); `agentgate store init` run as the store's owner puts it back",
        )
        explained = reader.explain(first)
        assert not explained.indexed and [e.index for e in explained.related] == [1]


def test_a_dropped_trigger_of_the_record_is_reported(tmp_path: Path) -> None:
    """Review R56: a dropped trigger of agentgate_store_parts went unreported by verify."""
    db = tmp_path / "agentgate.db"
    key = SigningKey(b"\x06" * 32)
    with SQLiteStore(db) as store:
        AuditLog(store, key, ORIGIN).append({"kind": "deny", "principal": "did:key:zA"})
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER agentgate_store_parts_no_delete")
    with SQLiteStore(db) as store:
        report = AuditLog(store, key.public, ORIGIN, create=False).verify()
    assert report.entries_verify and len(report.unprotected) == 1
    assert report.unprotected[0].startswith(
        "the protection trigger agentgate_store_parts_no_delete on table agentgate_store_parts is "
        "missing: the log is no longer protected against a deletion of the record that the log was made"
    )


# --- PostgreSQL: the catalog and the rows ----------------------------------------------------------------

_AUDIT_TABLES = (
    "audit_log",
    "audit_checkpoints",
    "audit_refs",
    "audit_refs_built",
    "audit_nodes",
    "agentgate_store_parts",
)


def _catalog(url: str) -> dict[str, object]:
    """What a write could change, read without agentgate: the schema's tables, triggers (with
    their state), indexes and functions, and every row of the audit tables there are."""
    with psycopg.connect(url) as conn:
        tables = sorted(
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace"
            )
        )
        state: dict[str, object] = {
            "tables": tables,
            "triggers": sorted(
                conn.execute(
                    "SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c "
                    "ON c.oid = t.tgrelid WHERE NOT t.tgisinternal"
                ).fetchall()
            ),
            "indexes": sorted(
                conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
                ).fetchall()
            ),
            "functions": sorted(
                conn.execute(
                    "SELECT proname, prosrc, proconfig FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
                ).fetchall(),
                key=str,
            ),
        }
        for table in _AUDIT_TABLES:
            if table in tables:
                state[table] = sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=str)
    return state


def _postgres(url: str) -> Store:
    from agentgate.store._postgres import PostgresStore

    return PostgresStore(url)


def _postgres_log(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> SigningKey:
    """A filled log in the database at ``url``, its key at ``tmp_path/log.key`` (``log.pub``
    beside it; ``AGENTGATE_LOG_KEY`` names it), its machinery then damaged as ``damage`` says."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    with _postgres(url) as store:
        key = open_log_key(store, create=True)
        _fill(AuditLog(store, key, ORIGIN))
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in DAMAGE[damage]["postgresql"]:
            conn.execute(sql)
    return key


@pytest.mark.postgres
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_read_verbs_change_nothing_in_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: None, postgres_url: str, damage: str
) -> None:
    """Review R56: on PostgreSQL the read verbs put back triggers, the index and the record."""
    _postgres_log(postgres_url, tmp_path, monkeypatch, damage)
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    before = _catalog(postgres_url)
    for argv in _read_verbs(tmp_path, str(tmp_path / "log.pub")):
        code = _run(argv)
        assert code == (1 if damage == "trigger" and argv[1] in ("verify", "report") else 0), argv
        assert _catalog(postgres_url) == before, argv


@pytest.mark.postgres
def test_postgresql_verify_reports_a_dropped_and_a_disabled_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    """Review R56: a disabled PostgreSQL trigger went unreported (and a dropped one was put back by verify)."""
    key = _postgres_log(postgres_url, tmp_path, monkeypatch, "trigger")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER audit_checkpoints_no_truncate")
    with _postgres(postgres_url) as store:
        report = AuditLog(store, key.public, ORIGIN, create=False).verify()
    assert report.entries_verify and report.size == ENTRIES
    assert [line.split(":")[0] for line in report.unprotected] == [
        "the protection trigger audit_log_append_only on table audit_log is missing",
        "the protection trigger audit_checkpoints_no_truncate on table audit_checkpoints is disabled",
    ]
    assert report.unprotected[1].endswith("`agentgate store init` run as the store's owner enables it")


# --- a writer's opening puts back what is missing ------------------------------------------------------


def test_a_writer_indexes_the_entries_appended_while_the_index_trigger_was_dropped(tmp_path: Path) -> None:
    """Review R56: entries appended while audit_log_index_ref was dropped stayed out of the index
    after a writer put the trigger back: explain missed them, verify called the index tampered."""
    key = SigningKey(b"\x05" * 32)
    first = _index_trigger_dropped_between_two_entries(tmp_path / "agentgate.db", key)
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        writer = AuditLog(store, key, ORIGIN)
        report = writer.verify()
        explained = writer.explain(first)
    assert report.ok, (report.problems, report.unprotected)
    assert explained.indexed and [e.index for e in explained.related] == [1]


def test_a_writer_puts_back_a_dropped_trigger_of_the_record(tmp_path: Path) -> None:
    """Review R56: a writer put the record's triggers back only where the record itself was missing."""
    db = tmp_path / "agentgate.db"
    key = SigningKey(b"\x06" * 32)
    with SQLiteStore(db) as store:
        AuditLog(store, key, ORIGIN).append({"kind": "deny", "principal": "did:key:zA"})
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER agentgate_store_parts_no_delete")
    with SQLiteStore(db) as store:
        AuditLog(store, key, ORIGIN)
        assert accept_repairs(store) == [
            "the protection trigger agentgate_store_parts_no_delete on table agentgate_store_parts was missing"
        ]
        assert AuditLog(store, key.public, ORIGIN, create=False).verify().ok


@pytest.mark.postgres
def test_a_writer_puts_back_a_postgresql_trigger_dropped_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    """Review R56: a PostgreSQL writer made the log's five triggers only when audit_log_next_index
    was missing, so audit_log_append_only dropped alone stayed dropped (and store init said so)."""
    key = _postgres_log(postgres_url, tmp_path, monkeypatch, "trigger")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER agentgate_store_parts_no_truncate ON agentgate_store_parts")
    with _postgres(postgres_url) as store:
        AuditLog(store, key, ORIGIN)
    with _postgres(postgres_url) as store:
        assert accept_repairs(store) == [
            "the protection trigger agentgate_store_parts_no_truncate on table agentgate_store_parts was missing",
            "the protection trigger audit_log_append_only on table audit_log was missing",
        ]
        assert AuditLog(store, key.public, ORIGIN, create=False).verify().ok
