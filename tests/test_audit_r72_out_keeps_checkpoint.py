"""``audit prove --out FILE`` and ``audit report --out FILE`` over a saved checkpoint.

Until review R72 both replaced FILE unread: a slip of tab completion (``--out cp.txt`` for
``--out cp.proof``) replaced the checkpoint saved outside the database, the one piece of evidence
that shows a rollback (``audit verify --checkpoint``), with a bundle or an HTML page, where
``audit checkpoint --out`` refuses to replace any file that holds something other than a
checkpoint, and every verb refuses to write over the database or the log's keys.
"""

from __future__ import annotations

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


def _saved(tmp_path: Path) -> tuple[Path, Path, str]:
    """A store with 3 entries and a checkpoint saved in ``cp.txt``."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        note = log.checkpoint()
    saved = tmp_path / "cp.txt"
    saved.write_text(note, encoding="utf-8")
    return db, saved, note


@pytest.mark.parametrize("verb", [("prove", "1"), ("report",)], ids=["prove", "report"])
def test_a_saved_checkpoint_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]
) -> None:
    """Review R72: ``--out`` naming a file that holds a saved checkpoint replaced it with a proof
    bundle or a page (exit 0). Rule: refused (exit 2, one line naming FILE and that it holds a
    checkpoint), the file kept as it was."""
    db, saved, note = _saved(tmp_path)
    code, out, err = cli(capsys, "audit", *verb, "--store", str(db), "--out", str(saved))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {saved}: cannot write: it holds a saved checkpoint"), err
    assert saved.read_text(encoding="utf-8") == note


@pytest.mark.parametrize("verb", [("prove", "1"), ("report",)], ids=["prove", "report"])
def test_a_checkpoint_body_alone_is_kept_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]
) -> None:
    """Review R72 kept only a saved checkpoint and replaced a checkpoint's body alone (exit 0).
    Since review R73 (test_audit_r73_out_refuses.py) only an earlier bundle or page, or an empty
    file, is replaced: the body alone, a damaged checkpoint, is refused (exit 2) and kept."""
    db, _saved_file, note = _saved(tmp_path)
    out_file = tmp_path / "out.txt"
    out_file.write_text(note.partition("\n\n")[0] + "\n", encoding="utf-8")
    code, out, err = cli(capsys, "audit", *verb, "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (out, err)
    assert out_file.read_text(encoding="utf-8") == note.partition("\n\n")[0] + "\n"
