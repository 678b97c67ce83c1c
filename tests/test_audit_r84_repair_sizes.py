"""Review R84: a row added to ``audit_repairs`` (append-only: an INSERT is allowed) whose
``log_size`` or ``checkpoint_size`` is not a whole number (SQLite keeps 3.5, text or bytes in the
column if given one) made ``_window`` raise ``ValueError`` on ``int('3.5')``: ``audit verify``,
``show`` and ``checkpoint`` ended in a traceback. A writer's opening records whole numbers only:
such a row is now reported as a repair record written outside agentgate, naming the value as
``verify`` names an index that is not a whole number (since reviews R68 and R71), and it is
refused and accepted as any repair is.

Review R84 (regression): such a row was logged by a writer's opening as "entries not known (its
log_size is 3.5 ...) were appended after the last checkpoint", which reads as no sentence; it is
now logged as ``verify`` reports it. And a whole number kept as a real (5.0, in a table made
again without the columns' types) was named "a fraction", where an index of 3.0 is read as 3
(``_stored_index``): it is now the number it is, the entries it names said as for any repair.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.audit._schema import _warn_repaired, accept_repair

WHAT = "the protection trigger audit_log_no_update on table audit_log was missing"


def _log_with_repair(db: Path, log_size: object, checkpoint_size: object) -> tuple[SQLiteStore, AuditLog]:
    store = SQLiteStore(db)
    log = AuditLog(store, SigningKey(b"\x07" * 32))
    for _ in range(3):
        log.append({"kind": "allow", "principal": "did:key:zAlice"})
    log.checkpoint()
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_repairs (created, what, log_size, checkpoint_size) VALUES (?, ?, ?, ?)",
            ("2026-01-01T00:00:00Z", WHAT, log_size, checkpoint_size),
        )
    return store, log


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
    store, log = _log_with_repair(tmp_path / "a.db", log_size, checkpoint_size)
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


def test_a_repair_with_a_fraction_for_a_size_is_logged_as_verify_reports_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _log = _log_with_repair(tmp_path / "a.db", 3.5, 0)
    with caplog.at_level(logging.WARNING, logger="agentgate.audit"):
        _warn_repaired(store, 0)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "agentgate.audit"]
    assert warning == (
        f"audit log: repair 1: {WHAT}; its log_size is 3.5 (a fraction), not a whole number: a repair "
        "record written outside agentgate (someone with write rights on the store inserted it), so the "
        "entries it leaves unprotected are not known; audit verify reports it until it is accepted "
        "(agentgate audit accept-repair)"
    )
    store.close()


def test_a_whole_size_kept_as_a_real_names_the_entries_it_left_unprotected(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with sqlite3.connect(db) as made:  # audit_repairs made again without the sizes' types
        made.execute(
            "CREATE TABLE audit_repairs (id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, "
            "what TEXT NOT NULL, log_size, checkpoint_size, accepts INTEGER, accepted_by TEXT, reason TEXT)"
        )
    made.close()
    store, log = _log_with_repair(db, 5.0, 3.0)
    assert store.query("SELECT typeof(log_size), typeof(checkpoint_size) FROM audit_repairs") == [
        ("real", "real")
    ]
    (line,) = log.verify().repairs
    assert "fraction" not in line and "entries 3 to 4 were appended" in line, line
    assert accept_repair(store, 1, "the test", "checked") == f"repair 1 ({WHAT}; entries 3 to 4 unprotected)"
    store.close()
