"""``referring`` refuses a latest checkpoint row whose size is not an integer, as ``explain`` does.

SQLite keeps text or a fraction in ``audit_checkpoints.size`` when given one, and ``ORDER BY size
DESC`` sorts either above every integer, so such a row inserted beside the real checkpoint is
the one read as the latest. ``referring`` compared the log's end only with an integer size and
passed over this row: with a call's outcome, the newest entry, then deleted, it returned no entry
without a word, where ``explain`` of the same allow refused (the row does not match its signed
note). It now refuses it too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_tamper import KEY, ORIGIN, _attack

from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}
INSERT = "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)"


@pytest.mark.parametrize("size", ["x", 9.5])
@pytest.mark.parametrize("outcome_deleted", [True, False])
def test_a_checkpoint_size_that_is_no_integer_is_refused_as_explain_refuses_it(
    tmp_path: Path, size: object, outcome_deleted: bool
) -> None:
    store = SQLiteStore(tmp_path / "audit.db")
    try:
        log = AuditLog(store, KEY, ORIGIN)
        allow = log.append({"kind": "allow", **CALL})
        outcome = log.append({"kind": "outcome", "ref": allow, "status": "lease_granted", **CALL})
        log.checkpoint()
        attack = [(INSERT, (size, b"\0" * 32, "not a note", "now"))]
        if outcome_deleted:
            attack.append(("DELETE FROM audit_log WHERE idx = ?", (outcome,)))
        _attack(store, *attack)
        with pytest.raises(TamperDetected) as explained:
            log.explain(allow)
        with pytest.raises(TamperDetected) as referred:
            log.referring(allow)
        assert str(referred.value) == str(explained.value)
        assert "latest stored checkpoint" in str(referred.value)
    finally:
        store.close()
