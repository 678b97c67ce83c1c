"""A stored or saved checkpoint that does not open is named where ``audit explain`` and ``audit
checkpoint`` refuse over it.

Until review R72 the refusal quoted only the signed note's own error (``REFUSED: signed note has
no signature block; ...``, ``REFUSED: note carries no signature by the log key ...``), so that an
operator could not tell which note it was: the log's latest stored checkpoint (the one explain
proves against and checkpoint extends), or the one saved in ``--out FILE``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from _cli import cli
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_STORE"):
        monkeypatch.delenv(name, raising=False)


def _checkpointed(db: Path, *, then_unsigned: bool = False) -> None:
    """A log of three entries and a checkpoint; ``then_unsigned``: and a copy of that checkpoint
    appended with a NUL after its signature line (the table is append-only, not checked on insert)."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()
    if then_unsigned:
        with contextlib.closing(sqlite3.connect(db)) as raw, raw:
            raw.execute(
                "INSERT INTO audit_checkpoints(size, root, note, created) "
                "SELECT size, root, note || char(0), created FROM audit_checkpoints"
            )


def test_a_stored_checkpoint_without_signature_is_named_in_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: a copy of the stored checkpoint appended with a NUL after its signature line
    (the table is append-only, not checked on insert) was refused as ``REFUSED: signed note has
    no signature block``. Rule: the refusal says it is the latest stored checkpoint, of which
    size, that does not open, then why."""
    db = tmp_path / "agentgate.db"
    _checkpointed(db, then_unsigned=True)
    code, out, _err = cli(capsys, "audit", "explain", "1", "--store", str(db))
    assert code == 1, out
    assert out.startswith(
        "REFUSED: audit log: its latest stored checkpoint (size 3) does not open: signed note has no signature block"
    ), out


def test_a_wrong_key_names_the_checkpoint_it_does_not_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: ``explain --key`` with another log's public key was refused as ``REFUSED: note
    carries no signature by the log key ...``: which note was not said. Rule: the latest stored
    checkpoint is named, then the signature's error, whole."""
    db = tmp_path / "agentgate.db"
    _checkpointed(db)
    other = tmp_path / "other.pub"
    other.write_text(SigningKey.generate().public.did + "\n", encoding="utf-8")
    code, out, _err = cli(capsys, "audit", "explain", "1", "--store", str(db), "--key", str(other))
    assert code == 1, out
    assert out.startswith(
        "REFUSED: audit log: its latest stored checkpoint (size 3) does not open: note carries no signature"
    ), out


def test_checkpoint_names_the_stored_checkpoint_that_does_not_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: ``audit checkpoint`` over a latest stored checkpoint that does not open said
    ``REFUSED: signed note has no signature block``, as explain did. Rule: named the same way."""
    db = tmp_path / "agentgate.db"
    _checkpointed(db, then_unsigned=True)
    code, out, _err = cli(capsys, "audit", "checkpoint", "--store", str(db))
    assert code == 1, out
    assert out.startswith(
        "REFUSED: audit log: its latest stored checkpoint (size 3) does not open: signed note has no signature block"
    ), out


def test_checkpoint_out_names_a_saved_checkpoint_of_another_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: ``audit checkpoint --out FILE`` where FILE holds another log's checkpoint said
    ``REFUSED: note carries no signature by the log key ...``: whether the note was FILE's or the
    stored one was not said. Rule: the saved checkpoint is named, and FILE is kept. Since review
    R73 (test_audit_r73_saved_checkpoint_codes.py) it is unusable input, exit 2, as ``verify
    --checkpoint`` of the same file: one error line naming FILE."""
    db = tmp_path / "agentgate.db"
    _checkpointed(db)
    other = tmp_path / "other" / "agentgate.db"
    other.parent.mkdir()
    _checkpointed(other)
    saved = tmp_path / "cp.txt"
    with SQLiteStore(other) as store:
        note = AuditLog(store, open_log_key(store), ORIGIN).latest_checkpoint()
    assert note is not None
    saved.write_text(note, encoding="utf-8")
    code, out, err = cli(capsys, "audit", "checkpoint", "--store", str(db), "--out", str(saved))
    assert (code, out) == (2, ""), out
    assert err.startswith(
        f"agentgate: error: {saved}: not a checkpoint of this log signed by its key: note carries no signature"
    ), err
    assert saved.read_text(encoding="utf-8") == note
