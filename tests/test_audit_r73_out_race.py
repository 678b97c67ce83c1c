"""``audit prove --out FILE`` and ``audit report --out FILE``: the refusal of a file they did not
write (test_audit_r73_out_refuses.py) must hold at the moment the file is written.

Until this review's fix FILE was looked at before the log was read (and, for ``prove``, before a
checkpoint was signed) and replaced a moment to minutes later, unread: a file another process
put there in between (a checkpoint saved by ``audit checkpoint --out``, notes) was replaced.

The race is made deterministic as in test_cli_r72_out_race.py: the one function that writes
(``replace_file``, as the command calls it) is wrapped so that the file appears as the write
begins, as a second process would put it there. The command runs in this process, with a real
SQLite store and real files; nothing else is replaced.
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


def _appearing_as_written(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """Make ``out`` hold ``_THEIRS`` as the command begins to write it."""
    write = audit_cli.replace_file

    def appear_then_write(path: Path, *args: Any, **kwargs: Any) -> None:
        out.write_text(_THEIRS, encoding="utf-8")
        write(path, *args, **kwargs)

    monkeypatch.setattr(audit_cli, "replace_file", appear_then_write)


@pytest.mark.parametrize("earlier", [False, True], ids=["no file before", "an earlier output before"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_file_put_there_while_the_output_was_made_is_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verb: str,
    earlier: bool,
) -> None:
    """Review R73: a file put at FILE after the look (FILE missing then, or holding what the verb
    wrote before) was replaced, exit 0. Rule: exit 2, one error line naming FILE, FILE as the
    other writer left it, no temporary file left behind."""
    db, _note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    if earlier:
        code, _out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
        assert code == 0, err
    _appearing_as_written(monkeypatch, out_file)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert out_file.read_text(encoding="utf-8") == _THEIRS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".agentgate-")]
