"""Review R84: a row added to ``audit_repairs`` (append-only: an INSERT is allowed) whose
``log_size`` or ``checkpoint_size`` is not a whole number (SQLite keeps 3.5, text or bytes in the
column if given one) made ``_window`` raise ``ValueError`` on ``int('3.5')``: ``audit verify``,
``show`` and ``checkpoint`` ended in a traceback. A writer's opening records whole numbers only:
such a row is now reported as a repair record written outside agentgate, naming the value as
``verify`` names an index that is not a whole number (since reviews R68 and R71), and it is
refused and accepted as any repair is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.audit._schema import accept_repair

WHAT = "the protection trigger audit_log_no_update on table audit_log was missing"


@pytest.mark.parametrize(
    ("log_size", "checkpoint_size", "said"),
    [
        ("3.5", 0, "its log_size is 3.5 (a fraction)"),
        ("three", 0, "its log_size is 'three' (text)"),
        (3, b"\x01", "its checkpoint_size is x'01' (bytes)"),
    ],
    ids=["fraction", "text", "bytes"],
)
def test_a_repair_whose_sizes_are_not_whole_numbers_is_reported_not_raised(
    tmp_path: Path, log_size: object, checkpoint_size: object, said: str
) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    log = AuditLog(store, SigningKey(b"\x07" * 32))
    for _ in range(3):
        log.append({"kind": "allow", "principal": "did:key:zAlice"})
    log.checkpoint()
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_repairs (created, what, log_size, checkpoint_size) VALUES (?, ?, ?, ?)",
            ("2026-01-01T00:00:00Z", WHAT, log_size, checkpoint_size),
        )
    report = log.verify()
    assert report.entries_verify and not report.ok
    expected = f"{said}, not a whole number: a repair record written outside agentgate"
    assert len(report.repairs) == 1 and expected in report.repairs[0], report.repairs
    assert "a writer's opening of the log put it back" not in report.repairs[0]
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    with pytest.raises(TamperDetected, match="repair 1 at"):
        log.checkpoint()
    accepted = accept_repair(store, 1, "the test", "checked against the copy kept outside")
    assert accepted == f"repair 1 ({WHAT}; entries not known ({expected}) unprotected)"
    report = log.verify()
    assert report.ok and report.accepted_repairs[0].startswith(accepted)
    store.close()
