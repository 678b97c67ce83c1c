"""``AuditLog.append_many`` (agentgate/store/audit.py): a group commit writes every entry."""

from __future__ import annotations

from pathlib import Path

from test_audit_checkpoints import ALICE, _log


def test_append_many_writes_every_entry(tmp_path: Path) -> None:
    """Kills: ``append_many`` writing only part of the batch. Rule: a group commit writes all its
    entries or none, each at its own next index."""
    log = _log(tmp_path, 1)
    assert log.append_many([{"kind": "deny", "principal": ALICE}] * 3) == [1, 2, 3]
    assert log.size() == 4 and log.verify().ok
