"""`grant issue --out FILE` / `grant delegate --out FILE`: the refusal of a file that is not empty
must hold at the moment the token is written, and `--force` must name a file to replace.

Until review R72 the file was looked at (then ``_refuse_filled_out``) and the token renamed over
it a moment later: a file another process created in between was replaced, its token lost. And
`--force` without `--out` was taken silently, though it replaces nothing.

The race is made deterministic by wrapping the one function that writes (``replace_file``, as
the command calls it) so that the file appears as the write begins, as a second process would
create it: the window is microseconds in a real run, and two processes racing for it would be a
test of timing. The command itself runs in this process (``tests/_cli.py``), with a real SQLite
store and real files; nothing else is replaced.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from test_cli_r71_out_existing import _DELEGATE as _DELEGATE_UNTIMED
from test_cli_r71_out_existing import _ISSUE, _grants
from test_cli_r71_out_existing import here as here  # the fixture

import agentgate.cli.grant as grant_cli

_DELEGATE = [*_DELEGATE_UNTIMED, "--ttl", "30m"]
_THEIRS = b"ag1.someone-else's-token\n"


def _appearing_after_the_look(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """Make a file holding another token appear at ``out`` as the command begins to write it."""
    write = grant_cli.replace_file

    def appear_then_write(path: Path, *args: Any, **kwargs: Any) -> None:
        if not out.exists():
            out.write_bytes(_THEIRS)
        write(path, *args, **kwargs)

    monkeypatch.setattr(grant_cli, "replace_file", appear_then_write)


@pytest.mark.parametrize("argv", [_ISSUE, _DELEGATE], ids=["issue", "delegate"])
def test_a_file_created_after_the_look_is_not_replaced(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Review R72: a file created at --out between the look and the rename was replaced (exit 0),
    the token it held lost. Rule: exit 2 naming the file and --force, the file kept as it was,
    no grant recorded, no temporary file left."""
    _appearing_after_the_look(monkeypatch, here / "new.tok")
    before = _grants(here)
    code, out, err = cli(capsys, *argv, "--out", "new.tok")
    assert (code, out) == (2, ""), (code, out, err)
    assert err.count("\n") == 1 and err.startswith("agentgate: error: new.tok: "), err
    assert "--force" in err, err
    assert (here / "new.tok").read_bytes() == _THEIRS
    assert _grants(here) == before
    assert not [p for p in here.iterdir() if p.name.startswith(".agentgate-")]


def test_with_force_the_file_is_replaced_whole(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: --force keeps replacing what is there, at the moment of writing too."""
    _appearing_after_the_look(monkeypatch, here / "new.tok")
    code, out, err = cli(capsys, *_ISSUE, "--out", "new.tok", "--force")
    assert (code, err) == (0, ""), (code, out, err)
    assert (here / "new.tok").read_text().startswith("ag1.") and (here / "new.tok").read_bytes() != _THEIRS


def test_a_failed_record_leaves_no_file(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: the name is taken before the grant is recorded; a store that then fails leaves
    --out as it was (no file), not an empty one."""
    with contextlib.closing(sqlite3.connect(here / "st.db")) as db, db:  # a store that refuses the row
        db.execute(
            "CREATE TRIGGER r72_refuse BEFORE INSERT ON agentgate_grants BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    code, out, err = cli(capsys, *_ISSUE, "--out", "new.tok")
    assert code == 2, (code, out, err)
    assert not (here / "new.tok").exists()
    assert not [p for p in here.iterdir() if p.name.startswith(".agentgate-")]


def test_an_empty_file_is_still_written(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: mktemp's empty file stays writable without --force (review R71's rule)."""
    (here / "empty.tok").write_bytes(b"")
    code, out, err = cli(capsys, *_ISSUE, "--out", "empty.tok")
    assert (code, err) == (0, ""), (code, out, err)
    assert (here / "empty.tok").read_text().startswith("ag1.")


@pytest.mark.parametrize("argv", [_ISSUE, _DELEGATE], ids=["issue", "delegate"])
def test_force_without_out_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Review R72: --force without --out was taken silently (the token went to standard output,
    nothing replaced). Rule: exit 2, one line saying --force needs --out, nothing issued."""
    before = _grants(here)
    code, out, err = cli(capsys, *argv, "--force")
    assert (code, out) == (2, ""), (code, out, err)
    assert err.count("\n") == 1 and err.startswith("agentgate: error: "), err
    assert "--force" in err and "--out" in err, err
    assert _grants(here) == before
