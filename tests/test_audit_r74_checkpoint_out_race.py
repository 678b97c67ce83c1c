"""``audit checkpoint --out FILE``: what FILE held when the log was compared with it must still be
there when the new checkpoint is written.

FILE is looked at before the log is read and the checkpoint signed (a checkpoint saved there must
be one the log extends), and written after. Until review R74 the write replaced whatever was there
by then, unread: a file put there meanwhile (where there was none), another checkpoint saved over
the one compared with, or a symbolic link put in its place. ``prove`` and ``report`` closed the
same window in review R73 (test_audit_r73_out_race.py), and so do they now for a symbolic link.

The race is made deterministic as there: the one function that writes (``replace_file``, as the
command calls it) is wrapped so that FILE changes as the write begins, as a second process would
change it. The command runs in this process, with a real SQLite store and real files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment
from test_audit_r73_out_refuses import VERBS, _store

import agentgate.cli.audit as audit_cli
import agentgate.keys

assert log_environment  # the autouse fixture, imported to apply here

_THEIRS = "what someone kept here\n"


def _changing_as_written(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run ``change`` as the command begins to write its output."""
    write = audit_cli.replace_file

    def change_then_write(path: Path, *args: Any, **kwargs: Any) -> None:
        change()
        write(path, *args, **kwargs)

    monkeypatch.setattr(audit_cli, "replace_file", change_then_write)


def _changing_once_checked(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run ``change`` once ``replace_file`` has looked at what is there, as it makes the file it
    writes beside it (its ``tempfile.mkstemp``, in agentgate.keys alone)."""
    make = agentgate.keys.tempfile.mkstemp

    def change_then_make(*args: Any, **kwargs: Any) -> Any:
        change()
        return make(*args, **kwargs)

    monkeypatch.setattr(agentgate.keys, "tempfile", SimpleNamespace(mkstemp=change_then_make))


def _refused(capsys: pytest.CaptureFixture[str], db: Path, out_file: Path, *verb: str) -> None:
    code, out, err = cli(capsys, "audit", *verb, "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert not [p for p in out_file.parent.iterdir() if p.name.startswith(".agentgate-")]


@pytest.mark.parametrize("before", ["none", "empty", "saved"])
def test_a_file_put_there_while_the_checkpoint_was_signed_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], before: str
) -> None:
    """Review R74: a file put at FILE after it was compared with the log (FILE missing, empty, or
    holding a checkpoint the log extends) was replaced, exit 0. Rule: exit 2, one error line
    naming FILE, FILE as the other writer left it, no temporary file left behind."""
    db, note = _store(tmp_path)
    out_file = tmp_path / "cp.txt"
    if before != "none":
        out_file.write_text(note if before == "saved" else "", encoding="utf-8")
    _changing_as_written(monkeypatch, lambda: out_file.write_text(_THEIRS, encoding="utf-8"))
    _refused(capsys, db, out_file, "checkpoint")
    assert out_file.read_text(encoding="utf-8") == _THEIRS


def test_another_checkpoint_saved_over_the_one_compared_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R74: FILE held a checkpoint the log extends, and another well-formed checkpoint of
    the log was saved there while the new one was signed (the one the log was not compared with):
    it was replaced. Rule: refused as above, FILE keeps the other checkpoint."""
    db, note = _store(tmp_path)
    out_file = tmp_path / "cp.txt"
    out_file.write_text(note, encoding="utf-8")
    code, later, err = cli(capsys, "audit", "checkpoint", "--store", str(db))
    assert code == 0, err
    later = later.rpartition("verifier key:")[0]
    assert later != note
    _changing_as_written(monkeypatch, lambda: out_file.write_text(later, encoding="utf-8"))
    _refused(capsys, db, out_file, "checkpoint")
    assert out_file.read_text(encoding="utf-8") == later


def _linked_to_copy(out_file: Path) -> Callable[[], None]:
    """Replace ``out_file`` by a symbolic link to a copy of what it holds."""

    def link() -> None:
        copy = out_file.with_name("elsewhere.txt")
        copy.write_bytes(out_file.read_bytes())
        out_file.unlink()
        os.symlink(copy, out_file)

    return link


@pytest.mark.parametrize("verb", ["checkpoint", *VERBS])
def test_a_symbolic_link_put_in_place_of_the_earlier_output_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """Review R74: FILE held what the verb may replace (a checkpoint the log extends, an earlier
    bundle or page), and was made a symbolic link to a copy of it once the write had looked at it:
    the link was replaced, though a link there at the start is refused. Rule: refused as above, the
    link kept."""
    db, note = _store(tmp_path)
    out_file = tmp_path / "out.txt"
    args = ("checkpoint",) if verb == "checkpoint" else VERBS[verb]
    if verb == "checkpoint":
        out_file.write_text(note, encoding="utf-8")
    else:
        code, _out, err = cli(capsys, "audit", *args, "--store", str(db), "--out", str(out_file))
        assert code == 0, err
    _changing_once_checked(monkeypatch, _linked_to_copy(out_file))
    _refused(capsys, db, out_file, *args)
    assert out_file.is_symlink()


@pytest.mark.parametrize("change", ["put", "saved over", "linked"])
def test_a_refused_write_says_the_checkpoint_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """Review R74: when FILE changed while the checkpoint was signed, the checkpoint is stored in
    the log all the same (it is one of the log, signed; FILE alone is kept), and only a checkpoint
    saved over the one compared with said so: a file put where there was none, or a symbolic link
    put in place, left the reader to believe nothing was signed. Rule: each refusal's one line
    says the new checkpoint is stored in the log, and it is."""
    db, note = _store(tmp_path)
    out_file = tmp_path / "cp.txt"
    if change == "put":
        _changing_as_written(monkeypatch, lambda: out_file.write_text(_THEIRS, encoding="utf-8"))
    else:
        out_file.write_text(note, encoding="utf-8")
        if change == "saved over":
            _changing_as_written(monkeypatch, lambda: out_file.write_text(_THEIRS, encoding="utf-8"))
        else:
            _changing_once_checked(monkeypatch, _linked_to_copy(out_file))
    before = checkpoints(db)
    code, out, err = cli(capsys, "audit", "checkpoint", "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert "the new checkpoint is stored in the log" in err, err
    assert checkpoints(db) == before + 1
