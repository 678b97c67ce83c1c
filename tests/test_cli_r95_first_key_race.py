"""Two ``agentgate audit checkpoint`` runs on a log's first key (its first checkpoint, or step 4
of a rotation): the one that found no key and then, before it read the log, a checkpoint signed
by the key the other made, checks the log again with that key and goes on (review R95: until then
its throwaway key did not open that checkpoint, and an intact log was ``REFUSED`` as tampering,
exit 1). The other run is played in the window, in this process, by a hook on
``refuse_new_log_key``, which the command calls once it has found no key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment, signed_log
from test_audit_r57_repairs import ENTRY, ORIGIN

import agentgate.store.audit._keys as keys_module
from agentgate.audit.note import verifier_key
from agentgate.keys import load_signing_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key, previous_log_keys

__all__ = ["log_environment"]  # the fixture, autouse: the log's origin, no key or store named


def _another_run_in_the_window(monkeypatch: pytest.MonkeyPatch, db: Path) -> list[str]:
    """Make ``refuse_new_log_key`` (the moment ``audit checkpoint`` has found no key) let another
    run create the log key beside ``db`` and store a checkpoint signed by it; the notes it signed."""
    signed: list[str] = []
    refuse: Callable[..., None] = keys_module.refuse_new_log_key

    def refuse_then_another_signs(store: object, path: Path) -> None:
        refuse(store, path)
        if signed:  # the other run's own call, in open_log_key (marked below before it is made)
            return
        signed.append("")
        with SQLiteStore(db) as other:
            log = AuditLog(other, open_log_key(other), ORIGIN, previous_keys=previous_log_keys())
            log.append_many([ENTRY])
            signed[0] = log.checkpoint()

    monkeypatch.setattr(keys_module, "refuse_new_log_key", refuse_then_another_signs)
    return signed


def _signs_with_the_key_made_meanwhile(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, db: Path, before: int
) -> None:
    """``audit checkpoint`` on ``db`` (``before`` checkpoints stored, no log key there) reads the
    log with the key the other run made, exit 0: it prints the checkpoint that run signed (the
    log has not grown since, nothing new to sign) and that key's verifier key; the log verifies."""
    signed = _another_run_in_the_window(monkeypatch, db)
    code, out, err = cli(capsys, "audit", "checkpoint")
    assert (code, err) == (0, ""), out
    key = load_signing_key(db.parent / "log.key")  # the one key there, made by the other run
    assert out == f"{signed[0]}verifier key: {verifier_key(ORIGIN, key.public)}\n"
    assert checkpoints(db) == before + 1
    code, out, err = cli(capsys, "audit", "verify")
    assert (code, err) == (0, ""), out
    assert out.startswith("intact: 1 entry, ")


def test_first_checkpoint_uses_the_key_another_run_made_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    code, _, err = cli(capsys, "store", "init")
    assert code == 0, err
    _signs_with_the_key_made_meanwhile(capsys, monkeypatch, db, before=0)


def test_rotation_checkpoint_uses_the_new_key_another_run_made_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    signed_log(db, 0)  # a checkpoint under the old key
    (tmp_path / "log.key").rename(tmp_path / "old.key")
    (tmp_path / "log.pub").rename(tmp_path / "old.pub")
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(tmp_path / "old.pub"))
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    _signs_with_the_key_made_meanwhile(capsys, monkeypatch, db, before=1)
