"""Review R92 of ``grant issue --out`` (agentgate/keys.py, ``_name_taken``): the exclusive write
took the name ``--out`` gives by opening the empty file there to lock it, and read any failure of
that open as "a file that is not empty is there", so a file removed between the look and the open
was refused with a false message pointing to ``--force``: it is now written. (R92 also took an
empty file the user may not open without a lock; review R92b found that unsafe, and it is refused
with a true message: tests/test_keys_r92b_out_unopenable.py.)

The refusal of the open is made certain here, whatever the user: an ``os.open`` of FILE that does
not create it fails with ``EACCES`` (``tests/_unreadable_file.py``'s ``fail_reading`` fails the
creating open too, which is not the case of a file that is there)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from _cli import cli

from agentgate.keys import FilledFile, replace_file


def _refuse_opening(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make every ``os.open`` of ``path`` that would not create it fail with ``EACCES``."""
    real_open = os.open

    def refusing_open(opening: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(os.fspath(opening)).absolute() == path and not flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(opening))
        return real_open(opening, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".agentgate-"))


@pytest.fixture
def grant_argv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    for name in ("ops-root", "bob"):
        assert cli(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    argv = ["grant", "issue", "--issuer", "keys/ops-root.key", "--to", "keys/bob.pub", "--allow", "tool:x"]
    return [*argv, "--ttl", "1h", "--out", "new.tok"]


@pytest.fixture
def empty_out(tmp_path: Path) -> Path:
    """The empty file at ``new.tok``, the ``--out`` of ``grant_argv``."""
    out_file = tmp_path / "new.tok"
    out_file.write_bytes(b"")
    return out_file


@pytest.fixture
def unopenable_out(empty_out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``empty_out``, which the user may not open without creating it (``_refuse_opening``)."""
    _refuse_opening(monkeypatch, empty_out)
    return empty_out


def test_an_out_file_removed_as_it_is_opened_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grant_argv: list[str],
    empty_out: Path,
) -> None:
    out_file = empty_out
    real_open = os.open
    removed: list[bool] = []

    def removing_open(opening: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        # the open of the file found there that _name_taken locks (O_NOFOLLOW, without O_CREAT)
        taking = flags & os.O_NOFOLLOW and not flags & os.O_CREAT
        if taking and Path(os.fspath(opening)).absolute() == out_file and not removed:
            out_file.unlink()
            removed.append(True)
        return real_open(opening, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", removing_open)
    code, out, err = cli(capsys, *grant_argv)
    monkeypatch.undo()
    assert removed == [True]
    assert (code, err) == (0, ""), (code, out, err)
    assert out_file.read_text(encoding="ascii").startswith("ag1.")
    assert _leftovers(tmp_path) == []


def test_a_file_the_user_may_not_open_that_is_not_empty_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unopenable_out: Path
) -> None:
    """Made not empty between ``replace_file``'s first look and the taking of the name."""
    out_file = unopenable_out
    real_mkstemp = __import__("tempfile").mkstemp

    def filled_then_mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        out_file.write_bytes(b"theirs\n")
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr("tempfile.mkstemp", filled_then_mkstemp)
    with pytest.raises(FilledFile):
        replace_file(out_file, b"ours\n", 0o600, exclusive=True)
    monkeypatch.undo()
    assert out_file.read_bytes() == b"theirs\n"
    assert _leftovers(tmp_path) == []
