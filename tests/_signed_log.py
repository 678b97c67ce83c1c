"""A SQLite store with a signed audit log, as the ``agentgate audit`` tests over saved checkpoints
and ``--out`` files set it up (test_audit_r73_out_refuses.py, test_audit_r73_saved_checkpoint_codes.py
and those that import them): the log's origin from the environment, its key beside the database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture(autouse=True)
def log_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command reads the log as ``signed_log`` made it: its origin, no key or store named."""
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_STORE"):
        monkeypatch.delenv(name, raising=False)


def signed_log(db: Path, entries: int, after: int = 0) -> str:
    """A store at ``db`` (its folder made) with ``entries`` entries, a checkpoint over them, which
    is returned, and ``after`` entries past it; the log key is created where it is missing."""
    db.parent.mkdir(exist_ok=True)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * entries)
        note = log.checkpoint()
        if after:
            log.append_many([ENTRY] * after)
    return note


def checkpoints(db: Path) -> int:
    """How many checkpoints the store at ``db`` holds (read past agentgate, as a raw count)."""
    raw = sqlite3.connect(db)
    try:
        return int(raw.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone()[0])
    finally:
        raw.close()
