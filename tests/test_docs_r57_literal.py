"""Review R57: README.md, docs/quickstart.md, cli.md, concepts.md, policy-reference.md and
operations.md followed literally by a newcomer, in scratch directories outside the checkout,
each command run and compared with what the page says it prints and does.

What held (run by hand this review): the quickstart end to end (keys, ``policy schema -o`` the
same bytes as ``policies/policy.schema.json``, lint clean, the 2500 refused, the 800 paused,
approved and run, ``audit verify`` "intact: 6 entries ..."); concepts.md's set-up and its four
walk-throughs, word for word where the page quotes the output; every ``grant``, ``approval``,
``policy``, ``audit``, ``tasks``, ``broker`` and ``store`` verb of cli.md with the exit codes and
the refusals quoted in its Conventions (DURATION, AMOUNT, CAP, empty values, ``keys new --dir``
naming a file); every policy in ``policies/`` lints clean.

What did not hold, each with its test below:

- docs/operations.md says to verify the log "before putting anything back" when a protection
  trigger is missing, and recommends ``agentgate audit checkpoint`` from cron every minute; but
  ``audit checkpoint`` opened the log as a writer, which put the dropped trigger back, and then
  signed: an entry rewritten (with its leaf hash) while the trigger was gone was signed into a
  checkpoint, and ``audit verify``, TAMPERED before, said ``intact``. The evidence was gone
  within a minute. It now refuses first (REFUSED, exit 1, nothing signed or put back).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture
def checkpointed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite store at ``AGENTGATE_STORE`` with a checkpoint over entry 0 and entry 1 after it."""
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["first"]})
        log.checkpoint()
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["second"]})
    return db


def _rewrite_entry_1_past_a_dropped_trigger(db: Path) -> None:
    """What someone with DDL rights does: drop the trigger that refuses an edit, rewrite an entry
    no checkpoint covers yet, with the leaf hash that matches it."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER audit_log_no_update")
        (entry,) = conn.execute("SELECT entry FROM audit_log WHERE idx = 1").fetchone()
        forged = bytes(entry).replace(b"second", b"SECOND")
        digest = hashlib.sha256(b"\x00" + forged).digest()
        conn.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 1", (forged, digest))
    conn.close()


def _triggers(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    conn.close()
    return names


def test_checkpoint_refuses_a_log_whose_protection_trigger_is_missing_and_puts_nothing_back(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: audit checkpoint put a dropped protection trigger back and signed the entries
    edited meanwhile, so verify's TAMPERED became intact (docs/operations.md: verify first)."""
    _rewrite_entry_1_past_a_dropped_trigger(checkpointed)
    assert main(["audit", "verify"]) == 1
    assert "audit_log_no_update on table audit_log is missing" in capsys.readouterr().out
    triggers = _triggers(checkpointed)
    saved = checkpointed.parent / "saved.cp"

    assert main(["audit", "checkpoint", "--out", str(saved)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED: the protection trigger audit_log_no_update on table audit_log is missing")
    assert "agentgate audit verify" in out and "nothing was signed" in out
    assert _triggers(checkpointed) == triggers  # nothing put back: the evidence stays
    assert not saved.exists()
    with sqlite3.connect(checkpointed) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone() == (1,)
    conn.close()
    assert main(["audit", "verify"]) == 1  # still TAMPERED, naming the trigger
    assert "audit_log_no_update on table audit_log is missing" in capsys.readouterr().out


def test_checkpoint_signs_again_once_store_init_put_the_trigger_back(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: the way out that the refusal names, store init as the owner, then checkpoint."""
    with sqlite3.connect(checkpointed) as conn:
        conn.execute("DROP TRIGGER audit_log_no_update")
    conn.close()
    assert main(["audit", "checkpoint"]) == 1
    assert main(["store", "init"]) == 0
    capsys.readouterr()
    assert main(["audit", "checkpoint"]) == 0
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("intact: 2 entries")
