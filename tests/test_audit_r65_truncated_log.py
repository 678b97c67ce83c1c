"""Review R65: the whole log emptied by its owner (PostgreSQL ``TRUNCATE``, SQLite ``DELETE``, the
triggers dropped or disabled first) is tampering that ``verify`` names, from the stored
checkpoints or, with those emptied too, from the checkpoint saved outside the database; nothing is
re-signed over it (agentgate/store/audit/_verify.py, _log.py)."""

from __future__ import annotations

import pytest

from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x69" * 32)
ORIGIN = "r65.example/audit"
DELETED = "entries were deleted or the database was restored from an older copy"


def _emptied(store: Store, *tables: str) -> None:
    with store.transaction() as tx:
        for table in tables:
            if store.dialect == "postgresql":
                tx.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
                tx.execute(f"TRUNCATE {table}")
            else:
                for row in tx.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", (table,)
                ):
                    tx.execute(f"DROP TRIGGER {row[0]}")
                tx.execute(f"DELETE FROM {table}")


def _log(store: Store) -> tuple[AuditLog, str]:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(6):
        log.append({"kind": "deny" if i == 2 else "allow", "principal": "did:key:zAlice", "budget_delta": i})
    return log, log.checkpoint()


def test_a_truncated_log_is_named_by_its_stored_checkpoint(store: Store) -> None:
    """Review R65: every entry removed, the checkpoints left: TAMPERED from index 0, naming the
    checkpoint's size; ``checkpoint`` refuses to sign the empty log."""
    log, _saved = _log(store)
    _emptied(store, "audit_log")
    report = log.verify()
    assert not report.ok and report.size == 0 and report.first_bad_index == 0
    assert f"a checkpoint covers 6 entries but the log has 0: {DELETED}" in report.problems
    with pytest.raises(TamperDetected, match="has 0 entries, the last checkpoint had 6"):
        log.check_extends()


def test_a_truncated_log_and_checkpoints_are_named_by_the_saved_checkpoint(store: Store) -> None:
    """Review R65: the entries and the stored checkpoints both emptied: the stored side reads as
    an empty log, and the checkpoint saved outside names what is gone; ``checkpoint`` given it
    refuses to sign."""
    log, saved = _log(store)
    _emptied(store, "audit_log", "audit_checkpoints")
    assert log.verify().problems == ()  # nothing in the database says so: only the saved copy
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.first_bad_index == 0
    assert report.problems == (f"a checkpoint covers 6 entries but the log has 0: {DELETED}",)
    with pytest.raises(TamperDetected, match="has 0 entries, the saved checkpoint had 6"):
        log.check_extends(saved)
