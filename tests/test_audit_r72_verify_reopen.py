"""``audit verify`` without a key, when a checkpoint is signed and the log dropped while it runs.

With no key, no ``--checkpoint`` and no checkpoint stored, verify reads the log with a public key
that signs nothing; when that reading finds a checkpoint signed meanwhile, verify opens the log
again with the log key. Until review R72 only the first opening was guarded: a log dropped
between the two ended in ``agentgate: error:`` (exit 2) where the first opening says TAMPERED
(exit 1), or its ``--json`` object.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from test_audit_r57_repairs import ENTRY, ORIGIN

import agentgate.cli.audit as audit_cli
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_STORE"):
        monkeypatch.delenv(name, raising=False)


def _keyless_log(db: Path) -> None:
    """A log of 3 entries, no checkpoint, and no log key anywhere."""
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store, create=True), ORIGIN).append_many([ENTRY] * 3)
    (db.parent / "log.key").unlink()
    (db.parent / "log.pub").unlink(missing_ok=True)


def _sign_then_drop(db: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Put a hook on verify's opening of the log: before the first opening a checkpoint is signed
    (a new log key made, as ``audit checkpoint`` makes it), before the second the log's tables
    are dropped. Both are done to the real SQLite file; the openings themselves are the real
    ones. Returns the count of openings."""
    real: Callable[..., Any] = audit_cli.open_audit_log
    opened: list[int] = []

    def opening(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        if len(opened) == 1:
            with SQLiteStore(db) as store:
                AuditLog(store, open_log_key(store, create=True), ORIGIN).checkpoint()
        else:
            raw = sqlite3.connect(db)
            raw.execute("DROP TABLE audit_log")
            raw.execute("DROP TABLE audit_checkpoints")
            raw.commit()
            raw.close()
        return real(*args, **kwargs)

    monkeypatch.setattr(audit_cli, "open_audit_log", opening)
    return opened


def test_a_log_dropped_before_the_second_opening_is_tampered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: a log dropped between verify's key-less reading and its second opening with
    the log key ended as ``agentgate: error: ... dropped`` (exit 2). Rule: TAMPERED, exit 1, as
    a log dropped before the first opening."""
    db = tmp_path / "agentgate.db"
    _keyless_log(db)
    opened = _sign_then_drop(db, monkeypatch)
    code, out, err = cli(capsys, "audit", "verify", "--store", str(db))
    assert len(opened) == 2, opened
    assert (code, err) == (1, ""), (code, out, err)
    assert out.startswith("TAMPERED: 1 problem(s)\n") and "the audit log was dropped" in out, out


def test_a_log_dropped_before_the_second_opening_is_tampered_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: the same with ``--json`` printed no object (exit 2). Rule: the object a log
    dropped before the first opening gives: tampered, ``log_exists`` false, exit 1."""
    db = tmp_path / "agentgate.db"
    _keyless_log(db)
    opened = _sign_then_drop(db, monkeypatch)
    code, out, err = cli(capsys, "audit", "verify", "--store", str(db), "--json")
    assert len(opened) == 2, opened
    assert (code, err) == (1, ""), (code, out, err)
    printed = json.loads(out)
    assert printed["verdict"] == "tampered" and printed["log_exists"] is False, printed
    (problem,) = printed["problems"]
    assert problem["where"] == "log" and "the audit log was dropped" in problem["message"], problem
