"""An existing log key whose name does not end in ``.key`` (``AGENTGATE_LOG_KEY=keys/log.pem``),
with a second hard link (a backup made with ``ln`` or ``cp -al``) and no ``.pub`` beside it, is
the log key, read and used on a log with no checkpoint yet, as docs/operations.md says ("an
existing key is read whatever its name"). Until review R95 it was taken for a key left half made
by ``save_key`` (which makes only ``*.key`` names), and every opener of the log was refused:
``AGENTGATE_LOG_KEY must name a file ending in .key``, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment
from test_audit_r57_repairs import ORIGIN

from agentgate.audit.note import verifier_key
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import open_log_key

__all__ = ["log_environment"]  # the fixture, autouse: the log's origin, no key or store named


def _pem_key_linked_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SigningKey, Path]:
    """A log key at ``keys/log.pem`` (named by ``AGENTGATE_LOG_KEY``), also linked at
    ``backup/log.pem``, no ``.pub`` beside it; the key and the store (initialized, no checkpoint)."""
    key = SigningKey.generate()
    saved, public = save_key(key, tmp_path / "keys", "signer")
    public.unlink()
    pem = saved.rename(tmp_path / "keys" / "log.pem")
    (tmp_path / "backup").mkdir(mode=0o700)
    os.link(pem, tmp_path / "backup" / "log.pem")
    db = tmp_path / "s.db"
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(pem))
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    return key, db


def test_open_log_key_reads_a_key_of_another_name_linked_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, db = _pem_key_linked_twice(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        assert open_log_key(store).public == key.public
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["log.pem"]


def test_checkpoint_signs_with_a_key_of_another_name_linked_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, _ = _pem_key_linked_twice(tmp_path, monkeypatch)
    code, _, err = cli(capsys, "store", "init")
    assert code == 0, err
    code, out, err = cli(capsys, "audit", "checkpoint")
    assert (code, err) == (0, "")
    assert out.endswith(f"verifier key: {verifier_key(ORIGIN, key.public)}\n")
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["log.pem"]
