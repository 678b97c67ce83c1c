"""Review R82: with a rotated-out log key listed, a checkpoint note carrying a line by the log key
that does not verify was accepted when a previous key's line did: the log opened the note under
the log key, and on that refusal under each previous key, where the bad line counted as another
key's and was ignored (``agentgate audit verify --checkpoint`` said intact, exit 0). Now every
key the log knows is held to one rule: a line by the log key or by a previous one that does not
verify, or two lines by one of them, refuses the note (``TamperDetected``; ``verify --checkpoint``
exit 2), whichever key's line verifies. Lines by keys the log does not know are still ignored.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment  # noqa: F401  (the fixture: the origin, no key or store named)
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.audit.note import key_id, open_checkpoint
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

OLD, NEW, WITNESS = SigningKey(b"\x31" * 32), SigningKey(b"\x32" * 32), SigningKey(b"\x33" * 32)


def _line(key: SigningKey, signature: bytes = b"\x00" * 64) -> str:
    """A signature line under the log's origin with ``key``'s key id and ``signature``."""
    return f"\u2014 {ORIGIN} {base64.b64encode(key_id(ORIGIN, key.public) + signature).decode()}\n"


def _rotated(db: Path) -> tuple[AuditLog, str, str]:
    """A log signed by OLD, then rotated to NEW (OLD listed as a previous key): the log, a note
    of OLD and one of NEW."""
    old = AuditLog(SQLiteStore(db), OLD, ORIGIN)
    old.append_many([ENTRY] * 2)
    old_note = old.checkpoint()
    log = AuditLog(old.store, NEW, ORIGIN, previous_keys=[OLD.public])
    log.append(ENTRY)
    return log, old_note, log.checkpoint()


def test_a_bad_line_by_the_log_key_refuses_a_note_a_previous_key_signs(tmp_path: Path) -> None:
    log, old_note, _ = _rotated(tmp_path / "a.db")
    assert log.open_checkpoint(old_note).size == 2
    with pytest.raises(TamperDetected, match="does not verify"):
        log.open_checkpoint(old_note + _line(NEW))
    with pytest.raises(TamperDetected, match="does not verify"):
        open_checkpoint(old_note + _line(NEW), NEW.public, ORIGIN, [OLD.public])


def test_a_bad_line_by_a_previous_key_refuses_a_note_the_log_key_signs(tmp_path: Path) -> None:
    log, _, new_note = _rotated(tmp_path / "a.db")
    assert log.open_checkpoint(new_note).size == 3
    with pytest.raises(
        TamperDetected, match=f"rotated-out log key, key id {key_id(ORIGIN, OLD.public).hex()}"
    ):
        log.open_checkpoint(new_note + _line(OLD))


def test_two_lines_by_a_previous_key_refuse_the_note(tmp_path: Path) -> None:
    log, old_note, _ = _rotated(tmp_path / "a.db")
    signature = base64.b64decode(old_note.rsplit(" ", 1)[1])[4:]
    with pytest.raises(TamperDetected, match="two signature lines"):
        log.open_checkpoint(old_note + _line(OLD, signature))


def test_lines_by_keys_the_log_does_not_know_are_still_ignored(tmp_path: Path) -> None:
    log, old_note, new_note = _rotated(tmp_path / "a.db")
    assert log.open_checkpoint(old_note + _line(WITNESS)).size == 2
    assert log.open_checkpoint(new_note + _line(WITNESS)).size == 3


def test_verify_checkpoint_refuses_the_note_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "agentgate.db"
    _rotated(db)[0].store.close()
    save_key(NEW, tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", OLD.public.did)
    with SQLiteStore(db) as store:
        old_note = AuditLog(store, OLD, ORIGIN).checkpoints()[0]
    saved = tmp_path / "cp.txt"
    saved.write_text(old_note, encoding="utf-8")
    code, out, err = cli(capsys, "audit", "verify", "--checkpoint", str(saved))
    assert (code, err) == (0, "") and out.startswith("intact: 3 entries"), (out, err)
    saved.write_text(old_note + _line(NEW), encoding="utf-8")
    code, out, err = cli(capsys, "audit", "verify", "--checkpoint", str(saved))
    assert code == 2 and out == "", (out, err)
    assert "not a checkpoint of this log signed by its key" in err and "does not verify" in err, err
