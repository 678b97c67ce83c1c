"""``audit report --out`` and ``audit checkpoint --out`` refuse the write-ahead log and shared
memory of a store named through a symbolic link (review R87b). SQLite keeps them beside the file
the link names (review R87, ``resolved``), but the check for the command's own files still looked
for them beside the link: ``--out`` naming the real ``-wal``, held open by a running gateway, was
written over with the report (exit 0), and the real ``-shm`` was refused only as "not empty"."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from _cli import cli

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture
def linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``data/agentgate.db``, a store with one audit entry, named as ``agentgate.db``, a symbolic
    link to it, by ``AGENTGATE_STORE``; the real file's path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    (tmp_path / "data").mkdir()
    real, link = tmp_path / "data" / "agentgate.db", tmp_path / "agentgate.db"
    link.symlink_to(real)
    monkeypatch.setenv("AGENTGATE_STORE", str(link))
    with contextlib.closing(SQLiteStore(link)) as store:
        AuditLog(store, open_log_key(store)).append({"kind": "deny", "principal": "did:key:zBob"})
    return real


@pytest.mark.parametrize("verb", ["report", "checkpoint"])
@pytest.mark.parametrize("end", ["-wal", "-shm"])
def test_out_naming_a_file_beside_the_links_target_is_refused(
    linked: Path, capsys: pytest.CaptureFixture[str], verb: str, end: str
) -> None:
    with contextlib.closing(SQLiteStore(linked)) as running:  # a gateway holding the store open
        conn = running.connect()
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            own = Path(f"{linked}{end}")
            code, out, err = cli(capsys, "audit", verb, "--out", str(own))
            assert (code, out) == (2, ""), (code, out, err)
            assert err.count("\n") == 1 and err.startswith("agentgate: error: "), err
            assert f"cannot write: it is the store's database ({own})" in err, err
            # SQLite's own file, as the store's writes leave it: neither a page nor a checkpoint
            assert not own.read_bytes().startswith((b"<!DOCTYPE", b"agentgate.local"))
            assert running.query("SELECT COUNT(*) FROM audit_log")[0][0] == 1
        finally:
            running.disconnect(conn)
