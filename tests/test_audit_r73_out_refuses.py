"""``audit prove --out FILE`` and ``audit report --out FILE`` replace only what they wrote.

Review R72 kept a FILE holding a well-formed saved checkpoint, but replaced anything else unread:
a saved checkpoint whose body was damaged (a line edited, the signature block cut off: the file an
operator would want to look at), or any other text (notes, a key pasted in a file), went at a slip
of tab completion. Rule since review R73: FILE may be missing, empty, or hold what the same verb
wrote before (a proof bundle, whose first line is ``c2sp.org/tlog-proof@v1``; an agentgate audit
report page); anything else is refused, exit 2, one line naming FILE, nothing signed or written.
"""

from __future__ import annotations

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


def _store(tmp_path: Path) -> tuple[Path, str]:
    """A store with 3 entries, a checkpoint over them, and 2 entries past it (so that ``prove``
    signs a new checkpoint); the checkpoint is returned."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        note = log.checkpoint()
        log.append_many([ENTRY] * 2)
    return db, note


def _checkpoints(db: Path) -> int:
    raw = sqlite3.connect(db)
    try:
        return int(raw.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone()[0])
    finally:
        raw.close()


def _body_edited(note: str) -> str:
    origin, _size, rest = note.split("\n", 2)
    return f"{origin}\nthree\n{rest}"


def _signature_cut(note: str) -> str:
    return note.partition("\n\n")[0] + "\n"


CONTENTS = {
    "checkpoint, size line damaged": _body_edited,
    "checkpoint body without its signature": _signature_cut,
    "notes": lambda _note: "things to remember about the incident\n",
    "binary": lambda _note: "\x00\x01\x02",
}
VERBS = {"prove": ("prove", "1"), "report": ("report",)}


@pytest.mark.parametrize("content", list(CONTENTS))
@pytest.mark.parametrize("verb", list(VERBS))
def test_out_holding_what_the_verb_did_not_write_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, content: str
) -> None:
    """Review R73: a damaged saved checkpoint or other text in FILE was replaced (exit 0). Rule:
    refused, exit 2, one error line naming FILE, FILE as it was, no checkpoint signed."""
    db, note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    text = CONTENTS[content](note)
    out_file.write_text(text, encoding="utf-8")
    before = _checkpoints(db)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: "), err
    assert "refusing to replace it" in err and err.count("\n") == 1, err
    assert out_file.read_text(encoding="utf-8") == text
    assert _checkpoints(db) == before


@pytest.mark.parametrize("verb", list(VERBS))
def test_out_holding_an_earlier_output_or_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """Review R73: what the verb wrote before (run again each day into one file), and an empty
    file, are still replaced (exit 0)."""
    db, _note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    for _ in range(2):  # the second run replaces the first one's output
        code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
        assert code == 0, (out, err)
    written = out_file.read_text(encoding="utf-8")
    out_file.write_text("", encoding="utf-8")
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert code == 0, (out, err)
    assert out_file.read_text(encoding="utf-8") == written
