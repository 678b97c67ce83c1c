"""``audit prove --out FILE`` and ``audit report --out FILE`` replace only what they wrote.

Review R72 kept a FILE holding a well-formed saved checkpoint, but replaced anything else unread:
a saved checkpoint whose body was damaged (a line edited, the signature block cut off: the file an
operator would want to look at), or any other text (notes, a key pasted in a file), went at a slip
of tab completion. Rule since review R73: FILE may be missing, empty, or hold what the same verb
wrote before (a proof bundle, whose first line is ``c2sp.org/tlog-proof@v1``; an agentgate audit
report page); anything else is refused, exit 2, one line naming FILE, nothing signed or written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment, signed_log

assert log_environment  # the autouse fixture, imported to apply here


def _store(tmp_path: Path) -> tuple[Path, str]:
    """A store with 3 entries, a checkpoint over them, and 2 entries past it (so that ``prove``
    signs a new checkpoint); the checkpoint is returned."""
    db = tmp_path / "agentgate.db"
    return db, signed_log(db, 3, after=2)


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
    before = checkpoints(db)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: "), err
    assert "refusing to replace it" in err and err.count("\n") == 1, err
    assert out_file.read_text(encoding="utf-8") == text
    assert checkpoints(db) == before


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
