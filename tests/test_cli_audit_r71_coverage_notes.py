"""``audit verify`` names the entries no checkpoint covers whatever its verdict.

Until review R71 the note ``(the last M entries, F..N-1, are not yet covered by a checkpoint ...)``
ended only the verdict ``intact``: a log whose one fault was a dropped protection trigger was
``TAMPERED``, and its closing line ``the entries verify: N entries, root ..., K checkpoints; ...``
said nothing of the entries past the last checkpoint, the very ones nothing but the missing
trigger protected.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN
from test_audit_r68_verify_counts import _cli

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

# ``audit checkpoint`` refuses a log whose trigger is missing: the note must not tell to run it.
NOT_COVERED_TAMPERED = (
    "(the last 2 entries, 3..4, are not yet covered by a checkpoint; audit checkpoint signs "
    "none until audit verify says intact)"
)


def _log_without_trigger(db: Path, signed: int, after: int) -> None:
    """A log of ``signed`` entries under one checkpoint (none when 0), ``after`` more appended
    since, and its ``audit_log_no_update`` trigger dropped."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * signed)
        if signed:
            log.checkpoint()
        log.append_many([ENTRY] * after)
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.commit()
    raw.close()


def test_a_missing_trigger_verdict_names_entries_past_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a log of 5 entries, 3 under a checkpoint, with a trigger dropped closed with
    "the entries verify: 5 entries, root ..., 1 checkpoint; nothing refuses ..." and no word of
    entries 3 and 4, which ``intact`` names. Rule: the closing line names them too, and says
    that no checkpoint is signed until the log verifies (``audit checkpoint`` refuses it)."""
    db = tmp_path / "agentgate.db"
    _log_without_trigger(db, 3, 2)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 1
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 5 entries, root "), out
    assert f", 1 checkpoint {NOT_COVERED_TAMPERED}; nothing refuses an edit" in closing, out


def test_a_missing_trigger_verdict_on_a_log_with_no_checkpoint_names_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: with no checkpoint at all the closing line said nothing either, where
    ``intact`` says the log is unsigned. Rule: every entry is named as not covered."""
    db = tmp_path / "agentgate.db"
    _log_without_trigger(db, 0, 2)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 1
    closing = out.splitlines()[-1]
    assert (
        ", 0 checkpoints (the last 2 entries, 0..1, are not yet covered by a checkpoint; audit "
        "checkpoint signs none until audit verify says intact); " in closing
    ), out


def test_a_covered_log_with_a_missing_trigger_adds_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the note is for entries past the checkpoint only; a checkpoint over the whole
    log leaves the closing line as it was."""
    db = tmp_path / "agentgate.db"
    _log_without_trigger(db, 3, 0)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 1 and ", 1 checkpoint; nothing refuses an edit" in out.splitlines()[-1], out
