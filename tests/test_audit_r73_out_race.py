"""``audit prove --out FILE`` and ``audit report --out FILE``: the refusal of a file they did not
write (test_audit_r73_out_refuses.py) must hold at the moment the file is written.

Until this review's fix FILE was looked at before the log was read (and, for ``prove``, before a
checkpoint was signed) and replaced a moment to minutes later, unread: a file another process
put there in between (a checkpoint saved by ``audit checkpoint --out``, notes) was replaced.

The race is made deterministic as in test_cli_r72_out_race.py: a function the command calls
(``replace_file``, the one that writes, or ``_write_own``, once the log was read) is wrapped so
that the file appears then, as a second process would put it there. The command runs in this
process, with a real SQLite store and real files; nothing else is replaced.
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


_MOMENTS = {
    "as the write begins": "replace_file",
    "after the log was read": "_write_own",
}
"""When the other writer puts its file there: as the command calls this function of its module.
``_write_own`` since review R74, which made it use its caller's look rather than look again."""


def _appearing_at(monkeypatch: pytest.MonkeyPatch, out: Path, where: str) -> None:
    """Make ``out`` hold ``_THEIRS`` as the command calls ``audit_cli``'s function ``where``."""
    called = getattr(audit_cli, where)

    def appear_then_call(*args: Any, **kwargs: Any) -> None:
        out.write_text(_THEIRS, encoding="utf-8")
        called(*args, **kwargs)

    monkeypatch.setattr(audit_cli, where, appear_then_call)


@pytest.mark.parametrize("moment", list(_MOMENTS))
@pytest.mark.parametrize("earlier", [False, True], ids=["no file before", "an earlier output before"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_file_put_there_while_the_output_was_made_is_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verb: str,
    earlier: bool,
    moment: str,
) -> None:
    """Review R73: a file put at FILE after the look (FILE missing then, or holding what the verb
    wrote before) was replaced, exit 0. Rule: exit 2, one error line naming FILE, FILE as the
    other writer left it, no temporary file left behind. Review R74: the same where it is put
    there before ``_write_own`` is called, which no longer looks at FILE again on entry."""
    db, _note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    if earlier:
        code, _out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
        assert code == 0, err
    _appearing_at(monkeypatch, out_file, _MOMENTS[moment])
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert out_file.read_text(encoding="utf-8") == _THEIRS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".agentgate-")]
