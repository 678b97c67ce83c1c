"""``audit verify`` of a store whose log has no checkpoint, with no log key anywhere.

Until review R71 ``agentgate store init`` then ``agentgate audit verify`` exited 2 ("log.key: no
log key there ...") although nothing in the log is signed: with no checkpoint there is no
signature to check, and the key only names who may sign the next one.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _cli import cli
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_STORE"):
        monkeypatch.delenv(name, raising=False)


def test_a_fresh_store_verifies_as_empty_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: exit 2 on a store ``store init`` just made. Rule: intact, 0 entries, exit 0,
    in text and in JSON, and no key is made."""
    db = tmp_path / "agentgate.db"
    assert cli(capsys, "store", "init", "--store", str(db))[0] == 0
    code, out, err = cli(capsys, "audit", "verify", "--store", str(db))
    assert (code, err) == (0, "") and out.startswith("intact: 0 entries"), (out, err)
    code, out, err = cli(capsys, "audit", "verify", "--store", str(db), "--json")
    assert code == 0 and json.loads(out)["verdict"] == "intact", (out, err)
    assert not (tmp_path / "log.key").exists()


def test_entries_without_a_checkpoint_verify_unsigned_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a log with entries and no checkpoint, its key gone, verifies (unsigned), and
    an edited entry in it is still found (exit 1)."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store, create=True), ORIGIN).append_many([ENTRY] * 3)
    (tmp_path / "log.key").unlink()
    code, out, _err = cli(capsys, "audit", "verify", "--store", str(db))
    assert code == 0 and out.startswith("intact: 3 entries") and "(unsigned: no checkpoint yet" in out, out
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.execute(
        "UPDATE audit_log SET entry = CAST(REPLACE(CAST(entry AS TEXT), 'zA', 'zB') AS BLOB) WHERE idx = 1"
    )
    raw.commit()
    raw.close()
    code, out, _err = cli(capsys, "audit", "verify", "--store", str(db))
    assert code == 1 and "entry 1: bytes do not match the stored leaf hash" in out, out


def test_a_log_with_checkpoints_still_needs_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: only a log with no checkpoint is read without a key; one with checkpoints is
    refused as before (exit 2, the missing key named), not reported as tampered."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()
    (tmp_path / "log.key").unlink()
    code, out, err = cli(capsys, "audit", "verify", "--store", str(db))
    assert code == 2 and out == "" and "no log key there" in err, (out, err)
