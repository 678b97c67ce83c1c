"""The audit log at scale: the reference index checked by ``verify``, the entry
bound, the triggers and sizes from the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_audit_scale import KEY, ORIGIN, decision, login_role

from agentgate.cli.main import main
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture
def log(store: Store) -> AuditLog:
    return AuditLog(store, KEY, origin=ORIGIN)


def _call_log(log: AuditLog) -> None:
    """0 allow, 1 outcome of 0, 2 approval_required, 3 approval_given for 2, 4 allow (args that
    hold a decoy ``ref``), 5 outcome of 4."""
    log.append(decision())
    log.append(decision("outcome", ref=0, status="ok"))
    log.append(decision("approval_required"))
    log.append(decision("approval_given", ref=2))
    log.append(decision(args={"a": 1, "ref": 3, "resource": "x"}))
    log.append(decision("outcome", ref=4, status="ok"))


def _index_sql(store: Store, sql: str, params: tuple[Any, ...] = ()) -> None:
    with store.transaction() as tx:
        tx.execute(sql, params)


# --- the reference index is checked by verify ---------------------------------------------------


def test_verify_accepts_an_intact_reference_index(log: AuditLog) -> None:
    _call_log(log)
    log.checkpoint()
    assert log.verify().ok


@pytest.mark.parametrize(
    ("sql", "params", "said"),
    [
        (
            "DELETE FROM audit_refs WHERE idx = ?",
            (1,),
            "entry 1 refers to entry 0, but audit_refs has no row",
        ),
        (
            "UPDATE audit_refs SET ref = ? WHERE idx = ?",
            (4, 1),
            "entry 1 refers to entry 0, but audit_refs says 4",
        ),
        ("INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (4, 0), "audit_refs has a row for entry 4"),
    ],
)
def test_verify_reports_a_tampered_reference_index(
    log: AuditLog, store: Store, sql: str, params: tuple[Any, ...], said: str
) -> None:
    """The index hides an outcome from ``explain`` when a row is deleted or pointed elsewhere:
    ``verify`` (which reads every entry anyway) compares it with what the entries say."""
    _call_log(log)
    log.checkpoint()
    _index_sql(store, sql, params)
    report = log.verify()
    assert not report.ok
    assert any(said in problem for problem in report.problems), report.problems
    assert report.first_bad_index is None  # the entries themselves are intact


def test_verify_checks_the_index_across_batches(store: Store) -> None:
    log = AuditLog(store, KEY, origin=ORIGIN)
    log.append_many(
        [decision("outcome", ref=k - 1, status="ok") if k % 2 else decision() for k in range(300)]
    )
    assert log.verify().ok
    _index_sql(store, "DELETE FROM audit_refs WHERE idx = ?", (251,))
    assert [p for p in log.verify().problems if "audit_refs" in p] == [
        "entry 251 refers to entry 250, but audit_refs has no row for it "
        "(the reference index was tampered with: audit explain 250 would not show entry 251)"
    ]


def test_cli_verify_exits_1_for_a_tampered_reference_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, open_log_key(store))
    _call_log(log)
    log.checkpoint()
    _index_sql(store, "DELETE FROM audit_refs WHERE idx = 5")
    store.close()
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and "audit explain 4 would not show entry 5" in out


def test_a_tampered_index_is_rebuilt_as_the_docs_say(log: AuditLog, store: Store) -> None:
    _call_log(log)
    _index_sql(store, "UPDATE audit_refs SET ref = 4 WHERE idx = 1")
    assert log.explain(0).related == ()  # hidden
    _index_sql(store, "DELETE FROM audit_refs")
    _index_sql(store, "DELETE FROM audit_refs_built")
    again = AuditLog(store, KEY, origin=ORIGIN)
    assert again.verify().ok
    assert [e.index for e in again.explain(0).related] == [1]


def test_verify_of_a_growing_log_does_not_call_new_entries_tampering(log: AuditLog, store: Store) -> None:
    """Entries appended while verify reads (their index rows committed with them) are past the
    entries it read: they are not compared, and not reported. A row for an index not written yet
    names no entry (explain reads nothing through it) and is overwritten when that entry is."""
    _call_log(log)
    _index_sql(store, "INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (6, 2))
    reads = log._row_batches

    def growing(**kwargs: Any) -> Any:
        for batch in reads(**kwargs):
            yield batch
            log.append(decision("outcome", ref=0, status="ok"))

    log._row_batches = growing  # type: ignore[method-assign]
    assert log.verify().ok
    del log._row_batches
    assert [e.index for e in log.explain(2).related] == [3]
    assert log.verify().ok  # entry 6 (ref 0) replaced the stray row (6, 2)
    assert [e.index for e in log.explain(0).related] == [1, 6]


# --- the entry bound ------------------------------------------------------------------------------


def test_a_short_escape_heavy_reason_does_not_stop_long_ones_being_recorded_by_digest() -> None:
    """Reasons are sorted by their encoded size but kept by their length: a 250-character reason of
    control characters (1502 bytes encoded, kept in clear) sorted first and ended the elision, so
    the long reasons after it stayed and the entry was refused (an allow that could not be written)."""
    from agentgate.audit.entry import encode_bounded

    reasons = ["\x01" * 250, *("x" * 1000 for _ in range(3))]
    fields = {**decision(args={}), "index": 0, "time": "2026-11-29T10:15:00.000000Z", "reasons": reasons}
    data = encode_bounded(fields, 4096)
    assert len(data) <= 4096
    from agentgate.audit.entry import AuditEntry

    kept = AuditEntry.from_bytes(data).reasons
    assert kept[0] == "\x01" * 250 and sum(r.startswith("elided reason: 1000 bytes") for r in kept) >= 1


def test_the_bound_is_on_encoded_bytes_for_escapes_and_astral_characters() -> None:
    from agentgate.audit.entry import AuditEntry, encode_bounded

    for text in ("\x00" * 20_000, "\U0001f600" * 20_000, '"\\' * 20_000):
        fields = {**decision(args={"note": text}), "index": 0, "time": "2026-11-29T10:15:00.000000Z"}
        data = encode_bounded(fields, 4096)
        assert len(data) <= 4096
        assert "note" not in AuditEntry.from_bytes(data).args


def test_an_entry_exactly_at_the_bound_is_kept_whole() -> None:
    from agentgate.audit.entry import encode_bounded, encode_entry

    base = {**decision(args={"note": ""}), "index": 0, "time": "2026-11-29T10:15:00.000000Z"}
    room = 4096 - len(encode_entry(base))
    exact = {**base, "args": {"note": "y" * room}}
    assert len(encode_entry(exact)) == 4096 and encode_bounded(exact, 4096) == encode_entry(exact)
    over = {**base, "args": {"note": "y" * (room + 1)}}
    assert len(encode_bounded(over, 4096)) <= 4096


# --- sizes and indexes from the user --------------------------------------------------------------


def test_prove_past_the_end_signs_nothing(log: AuditLog) -> None:
    """``prove INDEX`` signed (and stored) a fresh checkpoint before finding INDEX past the end:
    bad input left a write behind."""
    from agentgate.errors import BeyondLogEnd

    _call_log(log)
    from agentgate.errors import InputError

    with pytest.raises(BeyondLogEnd):
        log.prove(6)
    with pytest.raises(InputError, match="entry -1"):
        log.prove(-1)
    assert log.checkpoints() == []
    assert log.prove(5).index == 5 and len(log.checkpoints()) == 1


@pytest.mark.parametrize("text", ["१", "1_0", "+1", " 1", "٣"])
def test_cli_index_is_ascii_digits_only(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``int()`` read a Devanagari digit, an underscore-grouped number or a sign as an index, so
    ``audit explain १`` explained entry 1: an index is now exactly ASCII digits (exit 2 otherwise)."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, open_log_key(store))
    for _ in range(12):
        log.append(decision())
    store.close()
    with pytest.raises(SystemExit) as exited:
        main(["audit", "explain", text])
    assert exited.value.code == 2
    assert "expected an entry index" in capsys.readouterr().err


# --- the reference trigger ------------------------------------------------------------------------


def test_a_rolled_back_append_leaves_no_index_row(log: AuditLog, store: Store) -> None:
    log.append(decision())
    with pytest.raises(RuntimeError), store.transaction() as tx:
        log.append(decision("outcome", ref=0, status="ok"), tx)
        raise RuntimeError("the caller's transaction fails after the append")
    assert store.query("SELECT idx, ref FROM audit_refs") == []
    assert log.append(decision("outcome", ref=0, status="error")) == 1
    assert [(int(i), int(r)) for i, r in store.query("SELECT idx, ref FROM audit_refs")] == [(1, 0)]
    assert log.verify().ok and log.entry(log.explain(0).related[0].index).status == "error"


def test_the_log_stays_append_only_with_the_index_trigger(log: AuditLog, store: Store) -> None:
    _call_log(log)
    for sql in ("UPDATE audit_log SET entry = entry WHERE idx = 1", "DELETE FROM audit_log WHERE idx = 1"):
        with pytest.raises(Exception, match="append-only"), store.transaction() as tx:
            tx.execute(sql)
    assert log.verify().ok


def _old_writer(url: str, started: Any, count: int) -> None:
    """A writer of the version before the index: appends allow/outcome pairs through a store whose
    index trigger is gone (dropped by the test before it starts)."""
    from agentgate.store import open_store

    store = open_store(url)
    log = AuditLog.__new__(AuditLog)  # the tables exist: write as an older AuditLog did
    log.store, log.max_entry_bytes, log._guess, log._guessing = store, 65536, None, False
    started.set()
    for k in range(count):
        index = log.append(decision())
        log.append(decision("outcome", ref=index, status=f"ok {k}"))
    store.close()


def test_the_backfill_indexes_a_log_that_an_old_writer_keeps_appending_to(
    store: Store, tmp_path: Path
) -> None:
    """An owner opens the log with this version (trigger created, older entries indexed) while a
    process of the previous version appends allow/outcome pairs: every outcome ends up indexed
    (verify compares the index with the entries)."""
    import multiprocessing

    from agentgate.store._postgres import PostgresStore

    log = AuditLog(store, KEY, origin=ORIGIN)
    for k in range(50):
        log.append(decision("outcome", ref=k - 1, status="ok") if k % 2 else decision())
    drops = (
        ["DROP TRIGGER audit_log_index_ref"]
        if store.dialect == "sqlite"
        else ["DROP TRIGGER audit_log_index_ref ON audit_log"]
    ) + ["DROP TABLE audit_refs", "DROP TABLE audit_refs_built"]
    for sql in drops:
        _index_sql(store, sql)
    url = str(store.path) if isinstance(store, SQLiteStore) else cast_url(store)
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    writer = context.Process(target=_old_writer, args=(url, started, 150))
    writer.start()
    try:
        assert started.wait(60)
        reopened = (
            SQLiteStore(store.path) if isinstance(store, SQLiteStore) else PostgresStore(cast_url(store))
        )
        with reopened:
            owner = AuditLog(reopened, KEY, origin=ORIGIN)
            assert owner.refs_indexed
    finally:
        writer.join(120)
    assert writer.exitcode == 0
    final = AuditLog(store, KEY, origin=ORIGIN)
    assert final.size() == 350
    report = final.verify()
    assert report.ok, report.problems
    assert [e.index for e in final.explain(348).related] == [349]


def cast_url(store: Store) -> str:
    from agentgate.store._postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    return str(store.url)


def test_rows_moved_after_the_checkpoint_are_not_also_called_index_tampering(
    log: AuditLog, store: Store
) -> None:
    """Entries swapped with their leaf hashes are reported as moved; the index rows that no longer
    match them are a consequence, not a second finding."""
    _call_log(log)
    log.checkpoint()
    log.append(decision())
    log.append(decision("outcome", ref=6, status="ok"))
    rows = {
        int(i): (bytes(e), bytes(h)) for i, e, h in store.query("SELECT idx, entry, leaf_hash FROM audit_log")
    }
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            tx.execute("DROP TRIGGER audit_log_no_update")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        for idx, other in ((6, 7), (7, 6)):
            tx.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (*rows[other], idx))
        if store.dialect == "postgresql":
            tx.execute("ALTER TABLE audit_log ENABLE TRIGGER USER")
    problems = log.verify().problems
    assert len(problems) == 2 and all("rows moved" in p for p in problems), problems


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda log: log.explain(10**30), "BeyondLogEnd"),
        (lambda log: log.entry(10**30), "BeyondLogEnd"),
        (lambda log: log.entry_bytes(2**63), "BeyondLogEnd"),
        (lambda log: log.explain(1.5), "InputError"),
        (lambda log: log.explain("1"), "InputError"),
        (lambda log: log.explain(True), "InputError"),
        (lambda log: log.prove("1"), "InputError"),
        (lambda log: log.consistency(1.5, 2), "InputError"),
        (lambda log: log.consistency("1", 2), "InputError"),
        (lambda log: log.consistency(1, 2.0), "InputError"),
    ],
)
def test_sizes_and_indexes_from_the_caller_are_typed_errors(log: AuditLog, call: Any, error: str) -> None:
    """A huge index overflowed SQLite (OverflowError) in explain and entry; a float, a string or a
    bool reached comparisons and bit operations (TypeError, AttributeError, 'negative shift count',
    or True read as entry 1)."""
    from agentgate import errors

    for _ in range(3):
        log.append(decision())
    log.checkpoint()
    with pytest.raises(getattr(errors, error)) as caught:
        call(log)
    assert isinstance(caught.value, errors.InputError)
    assert log.checkpoints() == [log.latest_checkpoint()]  # nothing signed by bad input


def test_references_beyond_the_index_range_are_no_false_alarm(log: AuditLog, store: Store) -> None:
    """The index holds references of up to 18 digits (PostgreSQL's trigger reads no more; SQLite's
    holds up to 2**63 - 1): verify compares exactly those, so an odd entry is no tampering."""
    _call_log(log)
    for ref in (10**18 - 1, 10**18, 2**63 - 1, 10**20):
        log.append(decision("outcome", ref=ref, status="ok"))
    log.checkpoint()
    assert log.verify().ok


def test_cli_explain_says_when_an_allow_has_no_outcome_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An allow without an outcome is legal (the call may still run) or the sign of a hidden one:
    explain cannot tell, and says so instead of printing nothing."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, open_log_key(store))
    _call_log(log)
    store.close()
    assert main(["audit", "explain", "0"]) == 0
    assert "no outcome found" not in capsys.readouterr().out
    _index_sql(SQLiteStore(tmp_path / "agentgate.db"), "DELETE FROM audit_refs WHERE idx = 1")
    assert main(["audit", "explain", "0"]) == 0
    out = capsys.readouterr().out
    assert "├── outcome: no outcome found (the call may still be running; audit verify checks" in out


@pytest.mark.postgres
def test_the_least_privilege_role_verifies_the_index(postgres_server: Any, postgres_url: str) -> None:
    """docs/operations.md's grants: the application role reads audit_refs (SELECT only), so its
    verify compares the index too, and reports a row the owner deleted."""
    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as owner:
        _call_log(AuditLog(owner, KEY, origin=ORIGIN))
        app_url = login_role(
            owner,
            postgres_server,
            postgres_url,
            "ag_r11",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ag_r11",
            "REVOKE UPDATE, DELETE ON audit_log, audit_checkpoints FROM ag_r11",
            "REVOKE INSERT, UPDATE, DELETE ON audit_refs, audit_refs_built FROM ag_r11",
        )
        with PostgresStore(app_url) as app:
            log = AuditLog(app, KEY, origin=ORIGIN)
            assert log.refs_indexed
            log.append(decision("outcome", ref=5, status="ok"))
            log.checkpoint()
            assert log.verify().ok
            with pytest.raises(Exception, match="permission denied"), app.transaction() as tx:
                tx.execute("DELETE FROM audit_refs WHERE idx = 6")
            _index_sql(owner, "DELETE FROM audit_refs WHERE idx = 6")
            assert any("audit explain 5 would not show entry 6" in p for p in log.verify().problems)
