"""The library signs no checkpoint over a log whose protection trigger is not in force.

Until review R57 ``agentgate audit checkpoint`` and ``audit prove`` refused to sign over such a log,
but the library did not: ``AuditLog.checkpoint()`` and ``Gate.verify()`` (which signs a checkpoint
first) signed the entries appended or edited while a trigger was dropped, changed or disabled after
the log was opened. Rules checked here: where a new checkpoint would be signed, both raise
``TamperDetected`` naming the first such trigger in ``audit verify``'s words and sign nothing;
a log that has not grown gets its stored checkpoint back (nothing is signed); ``check_extends``
refuses where ``checkpoint`` would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_audit_read_only import ORIGIN, _postgres
from test_audit_trigger_bodies import KEY
from test_gate import Setup

from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

DROPPED = "the protection trigger audit_log_no_update on table audit_log is missing"
ENTRY = {"kind": "allow", "principal": "did:key:zA", "resource": "tool:t"}


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[AuditLog]:
    """A log of three entries and a checkpoint over them, opened to write."""
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()
        yield log


def _drop_no_update(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.commit()
    raw.close()


def test_the_library_signs_no_checkpoint_over_a_log_whose_trigger_was_dropped(
    sqlite_log: AuditLog, tmp_path: Path
) -> None:
    """Review R57: AuditLog.checkpoint() signed over a log whose protection trigger was dropped after it opened."""
    _drop_no_update(tmp_path / "agentgate.db")
    sqlite_log.append(ENTRY)
    with pytest.raises(TamperDetected, match=f"audit log: {DROPPED}.*no checkpoint of 4 entries signed"):
        sqlite_log.checkpoint()
    with pytest.raises(TamperDetected, match=DROPPED):
        sqlite_log.check_extends()
    assert len(sqlite_log.checkpoints()) == 1  # nothing signed


def test_a_log_that_has_not_grown_gets_its_stored_checkpoint_back_unsigned(
    sqlite_log: AuditLog, tmp_path: Path
) -> None:
    """Review R57: the refusal covers signing only; the stored checkpoint of an unchanged log is returned as before."""
    stored = sqlite_log.latest_checkpoint()
    _drop_no_update(tmp_path / "agentgate.db")
    assert sqlite_log.checkpoint() == stored
    sqlite_log.check_extends()
    assert len(sqlite_log.checkpoints()) == 1


def test_gate_verify_signs_no_checkpoint_over_a_log_whose_trigger_was_dropped(tmp_path: Path) -> None:
    """Review R57: Gate.verify() signed a checkpoint over a log whose protection trigger was dropped after the gate opened it."""
    setup = Setup(tmp_path)
    try:
        assert setup.gate.verify().ok
        _drop_no_update(tmp_path / "agentgate.db")
        setup.gate.issue(setup.keys["root"], name="lead", key=setup.keys["lead"], role="worker")
        with pytest.raises(TamperDetected, match=DROPPED):
            setup.gate.verify()
        assert len(setup.gate.audit.checkpoints()) == 1
    finally:
        setup.gate.close()


@pytest.mark.postgres
def test_the_library_signs_no_checkpoint_over_a_postgresql_log_whose_trigger_was_disabled(
    postgres_url: str,
) -> None:
    """Review R57: AuditLog.checkpoint() signed over a PostgreSQL log whose protection trigger was disabled after it opened."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        log.append(ENTRY)
        with pytest.raises(
            TamperDetected,
            match="the protection trigger audit_log_append_only on table audit_log is disabled",
        ):
            log.checkpoint()
        assert len(log.checkpoints()) == 1
