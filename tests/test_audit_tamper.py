"""Tampering with the audit log, as an attacker with write access to the database would, is detected.

The attacker first removes the append-only triggers (as anyone with the database owner's rights
can), then edits, deletes, inserts or reorders rows. ``verify`` must report each one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _raw_sqlite import opened
from test_audit_checkpoints import ALICE, _log
from test_audit_checkpoints import KEY as LOG_KEY
from test_audit_checkpoints import ORIGIN as LOG_ORIGIN
from test_audit_checkpoints import _fill as _fill_log

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "test.example/audit"
TRIGGERS = (
    "audit_log_next_index",
    "audit_log_no_update",
    "audit_log_no_delete",
    "audit_checkpoints_no_update",
    "audit_checkpoints_no_delete",
)


def _fill(store: Store, n: int = 10) -> AuditLog:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(n):
        log.append(
            {"kind": "deny" if i % 3 == 0 else "allow", "principal": "did:key:zAlice", "budget_delta": i}
        )
    return log


def _attack(store: Store, *statements: tuple[str, tuple[object, ...]]) -> None:
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            for name in TRIGGERS:
                tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            tx.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER USER")
        for sql, params in statements:
            tx.execute(sql, params)


def _row(store: Store, idx: int) -> tuple[bytes, bytes]:
    data, stored = store.query("SELECT entry, leaf_hash FROM audit_log WHERE idx = ?", (idx,))[0]
    return bytes(data), bytes(stored)


def _flip_decision(data: bytes) -> bytes:
    entry = AuditEntry.from_bytes(data)
    return entry.model_copy(update={"kind": "allow" if entry.kind == "deny" else "deny"}).to_bytes()


def test_untouched_log_verifies(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    assert log.verify().ok


def test_decision_field_edited_is_named(store: Store) -> None:
    log = _fill(store)
    data, _ = _row(store, 6)
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 6", (_flip_decision(data),)))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 6
    assert "entry 6" in report.problems[0]


def test_decision_edited_with_rehashed_leaf_is_caught_by_the_checkpoint(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    forged = _flip_decision(_row(store, 4)[0])
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index is not None and report.first_bad_index <= 4
    assert "checkpoint of size 10" in report.problems[0]


def test_an_edit_under_two_checkpoints_is_said_as_its_range_under_the_later_one(store: Store) -> None:
    """Review R81: an entry edited with its leaf hash under two checkpoints was said, at the later
    one, to be "explained by entry 0 above", an entry no line named (the range's start, where the
    search began), and ``--json`` gave that problem the index 0. Rule: the later checkpoint is
    explained by the same range, and neither problem names an entry."""
    log = _fill(store, 6)
    log.checkpoint()
    for i in range(6, 9):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    log.checkpoint()
    forged = _flip_decision(_row(store, 4)[0])
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index == 0  # the first index no good root covers
    assert report.problems == (
        "checkpoint of size 6: root does not match the entries; an entry in [0, 6) was changed together "
        "with its leaf hash",
        "checkpoint of size 9: root does not match the entries; explained by the entry changed in [0, 6) above",
    )


def test_deleted_middle_entry_is_named(store: Store) -> None:
    log = _fill(store)
    _attack(store, ("DELETE FROM audit_log WHERE idx = 3", ()))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3


def test_deleted_last_entries_are_caught_by_a_stored_checkpoint(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx >= 8", ()))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 8


def test_deleted_last_entries_and_checkpoints_are_caught_by_a_saved_checkpoint(store: Store) -> None:
    log = _fill(store)
    saved = log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx >= 7", ()), ("DELETE FROM audit_checkpoints", ()))
    alone = log.verify()  # the entries left cannot tell; since review R56 the dropped triggers do
    assert alone.entries_verify and not alone.ok and alone.unprotected
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.first_bad_index == 7
    assert "older copy" in report.problems[0]


def test_a_row_inserted_below_index_0_is_reported(store: Store) -> None:
    """Kills: ``verify`` reading the log from index 0 only, so that a row inserted at index -1 (a
    copy of an entry, leaf hash and all) was seen by nothing but ``size`` and ``explain``: verify
    said "intact", ``show --last N`` showed N - 1 entries, and ``explain`` of the entry it copies
    refers to failed. Rule: a row at a negative index is no entry of the log; verify reports it
    (no entry index is named: the entries themselves are intact)."""
    log = _fill(store, 4)
    log.checkpoint()
    data, stored = _row(store, 3)
    _attack(store, ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (-1, ?, ?)", (data, stored)))
    report = log.verify()
    assert not report.ok and report.size == 4 and report.first_bad_index is None
    assert report.problems == (
        "audit_log has 1 row(s) at an index below 0 (the lowest -1), which no entry has: "
        "rows inserted outside agentgate",
    )


def test_show_last_n_shows_the_newest_entries_past_rows_below_index_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: with rows inserted below index 0, ``AuditLog.size`` counted them as entries and
    ``audit show --last N`` started that many rows past the newest entries: with three such
    rows, ``--last 2`` printed nothing (exit 0), hiding the newest entries. Rule: a row below
    index 0 is no entry; ``size`` counts entries, and ``--last N`` shows the newest N."""
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    log = _fill(store, 4)
    data, stored = _row(store, 3)
    _attack(
        store,
        *(
            ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (-k, data, stored))
            for k in (1, 2, 3)
        ),
    )
    assert log.size() == 4
    store.close()
    capsys.readouterr()
    assert main(["audit", "show", "--last", "2", "--store", str(path), "--key", KEY.public.did]) == 0
    assert [int(line.split()[0]) for line in capsys.readouterr().out.splitlines()] == [2, 3]


def test_inserted_entry_is_named(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    # Shift entries 5.. up by one and slip a forged entry in at 5, leaf hashes and all.
    rows = store.query("SELECT idx, entry, leaf_hash FROM audit_log WHERE idx >= 5 ORDER BY idx DESC")
    forged = AuditEntry.build(
        index=5,
        time=AuditEntry.from_bytes(_row(store, 5)[0]).time,
        kind="allow",
        principal="did:key:zMallory",
    ).to_bytes()
    statements = [("DELETE FROM audit_log WHERE idx >= 5", ())]
    for idx, data, stored in rows:
        statements.append(
            ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (idx + 1, data, stored))
        )
    statements.append(
        ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (5, forged, leaf_hash(forged)))
    )
    _attack(store, *statements)
    report = log.verify()
    assert not report.ok and report.first_bad_index == 6
    assert any("inserted or reordered" in p for p in report.problems)


def _drop_primary_key(store: Store) -> None:
    """``audit_log`` without its primary key (and its triggers), its rows kept: two rows may then
    hold one index."""
    if store.dialect == "sqlite":
        _attack(
            store,
            ("CREATE TABLE bare (idx INTEGER, entry BLOB, leaf_hash BLOB)", ()),
            ("INSERT INTO bare SELECT idx, entry, leaf_hash FROM audit_log", ()),
            ("DROP TABLE audit_log", ()),
            ("ALTER TABLE bare RENAME TO audit_log", ()),
        )
    else:
        _attack(store, ("ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey CASCADE", ()))


@pytest.mark.parametrize(
    ("size", "index", "copied"),
    [(10, 6, 6), (10, 6, 8), (10, 9, 9), (40, 15, 15), (40, 15, 20)],
    ids=["copy", "another-entry", "last", "batch-end-copy", "batch-end-another-entry"],
)
def test_a_second_row_of_one_index_is_named_at_that_index(
    store: Store, size: int, index: int, copied: int
) -> None:
    """Review R54: in a table without its primary key, a second row of index N was reported one
    index off ("entry N+1: missing (the next stored index is N)") and every later checkpoint as
    entries deleted; at the end of a batch of rows (the first batch is 16) it was not seen at all:
    verify said intact while ``audit show`` listed an entry more. Rule: each index that more
    than one row holds is named as such, first bad index N, and no index is called missing."""
    log = _fill(store, size)
    log.checkpoint()
    _drop_primary_key(store)
    _attack(
        store,
        ("INSERT INTO audit_log SELECT ?, entry, leaf_hash FROM audit_log WHERE idx = ?", (index, copied)),
    )
    report = log.verify()
    named = (
        f"entry {index}: 2 rows hold this index, which one entry has: rows inserted outside agentgate "
        "(verify checked one of them)"
    )
    assert report.first_bad_index == index and named in report.problems
    if copied == index:
        assert report.problems == (named,)
    else:  # which of the two rows the pass read is the database's choice: the other is the root's
        root = f"checkpoint of size {size}: root does not match the entries; entry {index} "
        assert all(p == named or p.startswith(root) for p in report.problems), report.problems


def test_reordered_entries_are_named(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    (a, ha), (b, hb) = _row(store, 2), _row(store, 5)
    _attack(
        store,
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 2", (b, hb)),
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 5", (a, ha)),
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index == 2


def test_two_checkpoints_of_one_size_with_different_roots_are_a_fork(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    other = sign_checkpoint(Checkpoint(ORIGIN, 10, b"\x42" * 32), KEY)
    with store.transaction() as tx:  # inserting is allowed by the triggers; only the content is wrong
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (10, b"\x42" * 32, other, "2026-01-01T00:00:00.000000Z"),
        )
    report = log.verify()
    assert not report.ok
    assert any("different roots" in p for p in report.problems)


def test_forged_checkpoint_signature_is_reported(store: Store) -> None:
    log = _fill(store)
    root = log.verify().root
    forged = sign_checkpoint(Checkpoint(ORIGIN, 10, root), SigningKey(b"\x66" * 32))
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (10, root, forged, "2026-01-01T00:00:00.000000Z"),
        )
    report = log.verify()
    assert not report.ok and "signature" in report.problems[0]


@pytest.mark.parametrize("row_id", [0, -5, -(2**63)])
def test_a_forged_checkpoint_row_at_a_negative_id_is_reported(store: Store, row_id: int) -> None:
    """Review R54: a checkpoint row inserted with a negative id (no trigger refuses it: only an
    existing id is) was never read by ``verify``, which read the rows from id 0 up, though
    ``checkpoint``, ``explain`` and ``prove`` build on it as the latest (it has the largest
    size): ``audit verify`` said intact while ``audit checkpoint`` refused a forged signature.
    Rule: verify checks every checkpoint row, whatever its id."""
    log = _fill(store)
    log.checkpoint()
    forged = sign_checkpoint(Checkpoint(ORIGIN, 1000, b"\x33" * 32), SigningKey(b"\x66" * 32))
    overriding = " OVERRIDING SYSTEM VALUE" if store.dialect == "postgresql" else ""
    with store.transaction() as tx:
        tx.execute(
            f"INSERT INTO audit_checkpoints (id, size, root, note, created){overriding} VALUES (?, ?, ?, ?, ?)",
            (row_id, 1000, b"\x33" * 32, forged, "2026-01-01T00:00:00.000000Z"),
        )
    with pytest.raises(TamperDetected):
        log.checkpoint()
    report = log.verify()
    assert report.checkpoints_checked == 1
    assert not report.ok and any("no signature by the log key" in problem for problem in report.problems)


def test_database_restored_from_an_older_copy_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    log = _fill(store, 6)
    backup = tmp_path / "old.db"
    with opened(backup) as copy, opened(path) as source:
        source.backup(copy)
    for i in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    saved = log.checkpoint()
    store.close()
    backup.replace(path)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    restored = SQLiteStore(path)
    log = AuditLog(restored, KEY, ORIGIN)
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.first_bad_index == 6
    restored.close()


def test_cli_verify_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only this group: the other verb groups are not what this test is about.
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    store = SQLiteStore(db)
    from agentgate.store.audit import open_log_key

    log = AuditLog(store, open_log_key(store), ORIGIN)
    for i in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    saved = tmp_path / "cp.txt"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 0
    data, _ = _row(store, 2)
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 2", (_flip_decision(data),)))
    capsys.readouterr()
    assert main(["audit", "verify"]) == 1
    assert "first bad index: 2" in capsys.readouterr().out
    (tmp_path / "garbage.txt").write_text("not a checkpoint")
    assert main(["audit", "verify", "--checkpoint", str(tmp_path / "garbage.txt")]) == 2
    store.close()


def test_checkpoint_refuses_to_sign_a_tampered_log(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    forged = _flip_decision(_row(store, 4)[0])
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    )
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    with pytest.raises(TamperDetected, match="no longer match"):
        log.checkpoint()
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 10", (b'{"forged":1}',)))
    with pytest.raises(TamperDetected):
        log.checkpoint()


# --- tampering that a checkpoint refuses to sign over -------------------------------------------


def test_verify_names_a_checkpoint_row_whose_root_column_was_edited(sqlite_store: SQLiteStore) -> None:
    """Kills A1 (``verify`` compares only the size column with the signed note, not the root
    column): an edited root column makes every later ``checkpoint()`` refuse to sign, and
    ``verify`` must say why rather than report the log intact."""
    log = _fill(sqlite_store)
    log.checkpoint()
    assert log.verify().ok
    _attack(sqlite_store, ("UPDATE audit_checkpoints SET root = ?", (b"\x00" * 32,)))
    report = log.verify()
    assert not report.ok
    assert any("root column does not match its signed note" in p for p in report.problems)
    with pytest.raises(TamperDetected):
        log.checkpoint()


def test_checkpoint_refuses_to_sign_over_an_entry_edited_after_the_last_checkpoint(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills A5 (``checkpoint()`` no longer compares the bytes of entries newer than the last
    checkpoint with their stored leaf hashes): an entry whose decision was flipped, leaf hash
    left as it was, would be covered by a fresh signature."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    for i in range(2):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": 100 + i})
    data, _stored = _row(sqlite_store, 7)
    entry = AuditEntry.from_bytes(data)
    forged = entry.model_copy(update={"kind": "deny"}).to_bytes()
    _attack(sqlite_store, ("UPDATE audit_log SET entry = ? WHERE idx = 7", (forged,)))
    before = log.checkpoints()
    with pytest.raises(TamperDetected, match="entry 7"):
        log.checkpoint()
    assert log.checkpoints() == before


def test_checkpoint_refuses_to_sign_over_rows_swapped_after_the_last_checkpoint(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills A6 (``checkpoint()`` no longer checks that each newer entry carries its own index):
    two entries swapped with their leaf hashes (each row self-consistent) would be signed in the
    wrong order."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    for i in range(2):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": 100 + i})
    six, seven = _row(sqlite_store, 6), _row(sqlite_store, 7)
    sql = "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?"
    _attack(sqlite_store, (sql, (*seven, 6)), (sql, (*six, 7)))
    before = log.checkpoints()
    with pytest.raises(TamperDetected, match="entry 6 does not carry its own index"):
        log.checkpoint()
    assert log.checkpoints() == before


def test_explain_proves_the_last_entry_a_checkpoint_covers(sqlite_store: SQLiteStore) -> None:
    """Kills A9 (``_prove_included`` treats ``idx < size - 1`` as covered): the last entry of the
    latest checkpoint was then neither proven nor listed as unproven, so one rewritten with a
    matching leaf hash after the checkpoint was explained as if it were in the signed tree."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    shown = log.explain(5)
    assert shown.unproven == () and shown.checkpoint is not None and shown.checkpoint.size == 6
    data, _stored = _row(sqlite_store, 5)
    forged = AuditEntry.from_bytes(data).model_copy(update={"kind": "deny"}).to_bytes()
    assert forged != data
    _attack(
        sqlite_store,
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 5", (forged, leaf_hash(forged))),
    )
    with pytest.raises(TamperDetected, match="entry 5"):
        log.explain(5)


# --- the same, on logs built by ``test_audit_checkpoints._log`` ---------------------------------
# The attacker drops the append-only triggers first, as anyone with the database owner's rights can.


def _attack_log(log: AuditLog, sql: str, params: tuple[object, ...] = ()) -> None:
    with log.store.transaction() as tx:
        if log.store.dialect == "sqlite":
            for name in ("audit_log_next_index", "audit_log_no_update", "audit_log_no_delete"):
                tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        tx.execute(sql, params)


def _rewrite(log: AuditLog, idx: int, **changes: object) -> None:
    """Edit entry ``idx`` and store the matching leaf hash too (only a checkpoint can tell)."""
    data = log.entry_bytes(idx)
    edited = AuditEntry.from_bytes(data).model_copy(update=changes).to_bytes()
    _attack_log(
        log, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (edited, leaf_hash(edited), idx)
    )


def test_explain_refuses_the_last_checkpointed_entry_edited_with_its_leaf_hash(tmp_path: Path) -> None:
    """Kills: ``_prove_included`` counting entry ``size - 1`` as not covered (``idx < size - 1``).
    Rule: the last entry a checkpoint covers is proven against it like any other, so an edit of
    it (leaf hash rewritten too) is refused, and it is not listed as unproven either."""
    log = _log(tmp_path, 5)
    log.checkpoint()
    assert log.explain(4).unproven == ()
    _rewrite(log, 4, kind="deny")
    with pytest.raises(TamperDetected, match="entry 4"):
        log.explain(4)


def test_prove_refuses_an_entry_edited_with_its_leaf_hash_after_the_checkpoint(tmp_path: Path) -> None:
    """Kills: ``prove`` returning the proof rebuilt from the stored leaf hashes without checking
    it against the signed root. Rule: no bundle that cannot verify is handed out: an entry edited
    after its checkpoint (leaf hash rewritten too) gets ``TamperDetected``, not a bundle."""
    log = _log(tmp_path, 6)
    note = log.checkpoint()
    assert verify_bundle(log.prove(2, note).text(), LOG_KEY.public, LOG_ORIGIN)[0].kind == "allow"
    _rewrite(log, 2, kind="deny")
    with pytest.raises(TamperDetected, match="entry 2"):
        log.prove(2, note)


def test_checkpoint_refuses_to_build_on_an_edited_checkpoint_row(tmp_path: Path) -> None:
    """Kills: ``checkpoint`` trusting the latest row's size column without comparing it with its
    signed note, and ``verify`` not comparing each row's columns with its note. Rule: a checkpoint row whose size was edited (here shrunk, to re-sign over a
    rewritten tail) is tampering: nothing new is signed."""
    log = _log(tmp_path, 4)
    log.checkpoint()
    log.append({"kind": "deny", "principal": ALICE})
    with log.store.transaction() as tx:
        tx.execute("DROP TRIGGER audit_checkpoints_no_update")
        tx.execute("UPDATE audit_checkpoints SET size = 2")
    before = len(log.checkpoints())
    with pytest.raises(TamperDetected, match="does not match its signed note"):
        log.checkpoint()
    assert len(log.checkpoints()) == before
    report = log.verify()
    assert any("does not match its signed note (row edited)" in p for p in report.problems), report.problems


def test_checkpoint_refuses_a_saved_checkpoint_that_forks_the_stored_one(tmp_path: Path) -> None:
    """Kills: ``checkpoint`` dropping its check that the saved checkpoint and the last stored one
    agree at the same size. Rule: two signed roots for one size is a fork; nothing is signed."""
    log = _log(tmp_path, 3)
    stored = log.open_checkpoint(log.checkpoint())
    log.append({"kind": "deny", "principal": ALICE})
    forked = sign_checkpoint(Checkpoint(LOG_ORIGIN, stored.size, b"\x44" * 32), LOG_KEY)
    with pytest.raises(TamperDetected, match="disagree"):
        log.checkpoint(forked)
    assert log.open_checkpoint(log.checkpoint()).size == 4  # without it, the log signs as usual


def test_consistency_refuses_a_log_with_a_deleted_entry(tmp_path: Path) -> None:
    """Kills: ``_subtree_roots`` without its gap check (a missing row shifts every later leaf).
    Rule: a proof is never built over a log with an entry missing: ``TamperDetected``."""
    log = _log(tmp_path, 6)
    _attack_log(log, "DELETE FROM audit_log WHERE idx = 2")
    with pytest.raises(TamperDetected, match="entry 2 is missing"):
        log.consistency(1, 5)


def _swap(log: AuditLog) -> None:
    (a, ha), (b, hb) = ((log.entry_bytes(i), leaf_hash(log.entry_bytes(i))) for i in (3, 4))
    _attack_log(log, "DELETE FROM audit_log WHERE idx IN (3, 4)")
    _attack_log(
        log, "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (3, ?, ?), (4, ?, ?)", (b, hb, a, ha)
    )


def _spaced(log: AuditLog) -> None:
    data = log.entry_bytes(3).replace(b'"kind":', b'"kind": ')
    _attack_log(log, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 3", (data, leaf_hash(data)))


ATTACKS = {
    "row deleted": (
        lambda log: _attack_log(log, "DELETE FROM audit_log WHERE idx = 3"),
        "entry 3 is missing",
        "entry 3: missing",
    ),
    "entry edited": (
        lambda log: _attack_log(log, "UPDATE audit_log SET entry = ? WHERE idx = 3", (log.entry_bytes(2),)),
        "entry 3 does not match its leaf hash",
        "entry 3: bytes do not match",
    ),
    "rows swapped with their hashes": (
        _swap,
        "entry 3 does not carry its own index",
        "entry 3: holds the entry of index 4",
    ),
    "non-canonical bytes, hash recomputed": (
        _spaced,
        "entry 3 is not a canonical entry",
        "entry 3: is not a canonical",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_tampering_after_the_last_checkpoint_is_refused_and_reported(store: Store, attack: str) -> None:
    """Kills: each of ``checkpoint``'s refusals (a missing index, bytes that do not match their
    leaf hash, an entry not carrying its own index, bytes that are not a canonical entry) and
    ``verify``'s checks of the entries no checkpoint covers (the gap test, the leaf hash
    comparison, the own-index and canonical-form reading, ``_index_of``'s re-encoding) dropped.
    Rule: tampering with entries newer than the last checkpoint is never signed over, and
    ``verify`` names the entry (on SQLite and PostgreSQL)."""
    log = _fill_log(store, 2)
    first = log.checkpoint()
    for _ in range(4):
        log.append({"kind": "deny", "principal": ALICE, "reasons": ["no grant"]})
    tamper, refusal, problem = ATTACKS[attack]
    tamper(log)
    with pytest.raises(TamperDetected, match=refusal):
        log.checkpoint()
    assert log.checkpoints() == [first]
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3
    assert any(p.startswith(problem) for p in report.problems), report.problems


def test_entries_deleted_under_a_checkpoint_are_refused_and_reported(store: Store) -> None:
    """Kills: ``checkpoint`` without its check that no target size is past the log's end, and
    ``verify`` without its report of a checkpoint larger than the log. Rule: the newest entries
    deleted under a stored checkpoint are named, and nothing is signed over the shorter log."""
    log = _fill_log(store, 5)
    log.checkpoint()
    _attack_log(log, "DELETE FROM audit_log WHERE idx >= 3")
    with pytest.raises(TamperDetected, match="has 3 entries"):
        log.checkpoint()
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3
    assert any("a checkpoint covers 5 entries but the log has 3" in p for p in report.problems)
