"""A protection trigger made again under agentgate's name in other letter case is caught and put back.

SQLite's names ignore ASCII case. Until review R58 agentgate looked its triggers up by exact name:
an owner who dropped ``audit_log_no_update`` and made ``AUDIT_LOG_NO_UPDATE`` that does nothing had
``verify`` say the trigger was missing, and a writer's opening record a repair ("was missing ...
put it back") while its ``CREATE TRIGGER IF NOT EXISTS`` skipped the name that was there: the
repair recorded was false, and updates of the log went on being allowed. The warning of that
opening also named "entries 2 to 1" where no entry was unprotected.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


def _tamper(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.execute("CREATE TRIGGER AUDIT_LOG_NO_UPDATE BEFORE UPDATE ON audit_log WHEN 0 BEGIN SELECT 1; END")
    raw.commit()
    raw.close()


def _update_refused(db: Path) -> bool:
    raw = sqlite3.connect(db)
    try:
        raw.execute("UPDATE audit_log SET entry = entry WHERE idx = 0")
    except sqlite3.DatabaseError:
        return True
    finally:
        raw.close()
    return False


def test_a_trigger_made_again_in_upper_case_is_named_changed_then_put_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R58: an upper-case AUDIT_LOG_NO_UPDATE read as missing, and the writer's "repair" left it, so updates stayed allowed."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    _tamper(db)
    assert not _update_refused(db)
    with SQLiteStore(db) as store:
        (line,) = AuditLog(store, open_log_key(store).public, ORIGIN, create=False).unprotected()
        assert "audit_log_no_update on table audit_log is not the one agentgate made" in line
    with caplog.at_level(logging.WARNING, logger="agentgate.audit"), SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)  # a writer's opening puts it back
        (repair,) = log.unprotected()
    assert _update_refused(db)
    assert repair.startswith("repair 1 at ")
    assert "audit_log_no_update on table audit_log was not the one agentgate made" in repair
    assert "no entry (every one was covered by a checkpoint) was appended after" in repair
    (warning,) = [r.getMessage() for r in caplog.records if "repair 1" in r.getMessage()]
    assert (
        "entries 2 to 1" not in warning
        and "no entry (every one was covered by a checkpoint) was appended" in warning
    )
