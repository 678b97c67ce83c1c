"""``audit prove --out FILE`` and ``audit report --out FILE`` look at FILE before the log is read
(``_refuse_replacing``) and write it after: a file put there in that window must be kept.

test_audit_r73_out_race.py puts the file there as ``replace_file`` begins; here it appears
earlier, as ``_write_own`` is called, once the log was read (and, for ``prove``, a checkpoint
signed), which is where review R74 made ``_write_own`` use its caller's look rather than look a
second time. Same set-up: the command runs in this process, with a real SQLite store and real
files; only the moment the other writer acts is chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from _signed_log import log_environment
from test_audit_r73_out_refuses import VERBS, _store

import agentgate.cli.audit as audit_cli

assert log_environment  # the autouse fixture, imported to apply here

_THEIRS = "what someone kept here\n"


def _appearing_before_the_write(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """Make ``out`` hold ``_THEIRS`` as the command calls ``_write_own``."""
    write_own = audit_cli._write_own

    def appear_then_write(*args: Any, **kwargs: Any) -> None:
        out.write_text(_THEIRS, encoding="utf-8")
        write_own(*args, **kwargs)

    monkeypatch.setattr(audit_cli, "_write_own", appear_then_write)


@pytest.mark.parametrize("earlier", [False, True], ids=["no file before", "an earlier output before"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_file_put_there_after_the_look_and_before_the_write_is_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verb: str,
    earlier: bool,
) -> None:
    """Review R74: ``_write_own`` no longer looks at FILE a second time; what its caller saw
    (nothing there, or the verb's own earlier output) picks how it writes, and a file put there
    since is still refused at the moment of writing. Rule: exit 2, one error line naming FILE,
    FILE as the other writer left it, no temporary file left behind."""
    db, _note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    if earlier:
        code, _out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
        assert code == 0, err
    _appearing_before_the_write(monkeypatch, out_file)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert out_file.read_text(encoding="utf-8") == _THEIRS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".agentgate-")]
