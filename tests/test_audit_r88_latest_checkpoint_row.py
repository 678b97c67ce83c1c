"""Review R88: ``explain`` proves against the latest stored checkpoint row (the largest ``size``
column) and opened its note without comparing the row's size and root columns with it, as
``verify`` and ``checkpoint`` do. A copy of an old note inserted with a larger size column (the
triggers allow any INSERT) made ``explain`` prove against that older checkpoint: an entry edited
in the database after the newest one was signed (its leaf hash recomputed) was listed as not yet
covered instead of refused. Rule: ``explain`` refuses such a row, in ``checkpoint``'s words
(agentgate/store/audit/_proofs.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_audit_r88_surrogate import ORIGIN, audit_verbs_in

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

REFUSED = "audit log: the latest checkpoint row does not match its signed note"


@pytest.fixture
def rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AuditLog]:
    """Six entries checkpointed at sizes 2 and 6; entry 4 then edited (its leaf hash recomputed,
    the trigger that refuses updates dropped for it and put back) and the size-2 note inserted again with a size column of 7; the audit verbs pointed at it."""
    db = audit_verbs_in(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)
        for i in range(6):
            log.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:x", "budget_delta": i})
            if i == 1:
                log.checkpoint()
        log.checkpoint()
        edited = log.entry(4).model_copy(update={"kind": "deny"}).to_bytes()
    con = sqlite3.connect(db)
    with con:
        (trigger,) = con.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'audit_log_no_update'"
        ).fetchone()
        con.execute("DROP TRIGGER audit_log_no_update")
        con.execute(
            "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (edited, leaf_hash(edited))
        )
        con.execute(trigger)  # put back as it was: only the checkpoints can tell
        con.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) "
            "SELECT 7, root, note, created FROM audit_checkpoints WHERE size = 2"
        )
    con.close()
    store = SQLiteStore(db)
    yield AuditLog(store, open_log_key(store, create=False), ORIGIN, create=False)
    store.close()


def test_explain_refuses_a_latest_checkpoint_row_whose_columns_its_note_does_not_sign(
    rolled_back: AuditLog, capsys: pytest.CaptureFixture[str]
) -> None:
    assert AuditEntry.from_bytes(rolled_back.entry_bytes(4)).kind == "deny"
    with pytest.raises(TamperDetected, match=f"^{REFUSED}"):
        rolled_back.explain(4)
    with pytest.raises(TamperDetected, match=f"^{REFUSED}"):
        rolled_back.explain(0)  # covered by the older checkpoint too: no row's columns go unchecked
    capsys.readouterr()
    assert main(["audit", "explain", "4"]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith(f"REFUSED: {REFUSED}")
    assert main(["audit", "checkpoint"]) == 1  # as before: checkpoint compared the columns already
    out, _ = capsys.readouterr()
    assert out.startswith(f"REFUSED: {REFUSED}")
