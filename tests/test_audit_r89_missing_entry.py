"""An entry whose row was deleted is tampering, not an index of no entry.

Until review R89 ``explain`` and ``prove`` of an index below the log's end that no row holds
(``AuditLog._stored_row``) raised ``InputError``, ``audit log has no entry 3``: on the command line
exit 2, the code for unusable input such as an index past the end, where the signed checkpoint
that covers the index makes the missing row evidence of a deletion (``explain 4`` on the same log
already said ``REFUSED: ... entry 3 is missing``, exit 1). Now an index below the log's end, or
inside its latest signed checkpoint, that no row holds is ``TamperDetected`` naming it as missing
from the log; one past both is still ``BeyondLogEnd``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN
from test_audit_r68_verify_counts import _cli
from test_audit_tamper import _attack, _fill

from agentgate.errors import BeyondLogEnd, TamperDetected
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

MIDDLE = "audit log: entry 3 is missing from the log, which holds entries up to index 5 (its row was deleted)"


def test_a_row_deleted_in_the_middle_is_missing_from_the_log(store: Store) -> None:
    log = _fill(store, 6)
    log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx = 3", ()))
    for read in (log.explain, log.prove, log.entry, log.entry_bytes, lambda i: log.entries_at([2, i])):
        with pytest.raises(TamperDetected) as refused:
            read(3)
        assert str(refused.value) == MIDDLE
    assert log.checkpoints() == [log.latest_checkpoint()]  # prove signed nothing


def test_the_newest_rows_deleted_under_a_signed_checkpoint_are_missing(store: Store) -> None:
    log = _fill(store, 6)
    note = log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx >= 4", ()))
    for read in (log.explain, log.prove, log.entry, lambda i: log.prove(i, note)):
        with pytest.raises(TamperDetected, match=r"entr(y 5 is missing from the log|ies deleted)"):
            read(5)
    with pytest.raises(TamperDetected) as refused:
        log.entry(5)
    assert str(refused.value) == (
        "audit log: entry 5 is missing from the log, which has 4 entries, but its latest signed "
        "checkpoint covers 6 (entries deleted, or the database restored from an older copy)"
    )
    with pytest.raises(BeyondLogEnd):  # past the signed checkpoint too: input, not evidence
        log.explain(6)


def test_past_the_end_of_an_intact_log_is_still_input(store: Store) -> None:
    log = _fill(store, 4)
    log.checkpoint()
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    for read in (log.explain, log.entry, log.prove):
        with pytest.raises(BeyondLogEnd):
            read(5)


def log_missing_entry_3(tmp_path: Path) -> Path:
    """A SQLite file under ``tmp_path`` whose log held six entries under a checkpoint of them, then
    lost row 3 (its delete trigger dropped): the reviewer's log, on the command line."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 6)
        log.checkpoint()
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_delete")
    raw.execute("DELETE FROM audit_log WHERE idx = 3")
    raw.commit()
    raw.close()
    return db


def test_explain_and_prove_of_a_deleted_entry_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reviewer's case on the command line: exit 1 with a ``REFUSED`` line, as ``explain 4``."""
    db = log_missing_entry_3(tmp_path)
    for argv, ending in (
        (["audit", "explain", "3"], "nothing explained"),
        (["audit", "prove", "3", "--out", str(tmp_path / "p")], "no proof written"),
    ):
        code, out = _cli(db, argv, monkeypatch, capsys)
        assert code == 1 and out.startswith(f"REFUSED: {MIDDLE}; {ending}"), (argv, code, out)
    assert not (tmp_path / "p").exists()
