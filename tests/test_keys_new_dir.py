"""The key directory ``agentgate keys new --dir`` creates is private to its owner."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentgate.cli.main import main


@pytest.fixture()
def open_umask() -> object:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_keys_new_creates_a_missing_dir_readable_by_its_owner_only(
    tmp_path: Path, open_umask: object, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "parent" / "keys"
    assert main(["keys", "new", "alice", "--dir", str(directory)]) == 0
    assert capsys.readouterr().out.startswith("did:key:")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "alice.key").stat().st_mode) == 0o600


def test_keys_new_leaves_an_existing_dir_as_it_is(
    tmp_path: Path, open_umask: object, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    assert main(["keys", "new", "alice", "--dir", str(directory)]) == 0
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        ("file", "a file that is no directory"),
        ("fifo", "a file that is no directory"),
        ("loop", "a symbolic link to no directory"),
        ("dangling", "a symbolic link to no directory"),
    ],
)
def test_a_dir_that_is_no_directory_is_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, kind: str
) -> None:
    """Review R55: keys new --dir naming a file, a FIFO or a symbolic link that loops said
    "cannot create the key directory: File exists", as if the directory were there. Rule: exit 2,
    one line saying what is there instead, the path escaped."""
    target = tmp_path / "odd\ndir"
    if make == "file":
        target.write_text("x")
    elif make == "fifo":
        os.mkfifo(target)
    elif make == "loop":
        os.symlink(target, target)
    else:
        os.symlink(tmp_path / "nowhere", target)
    assert main(["keys", "new", "alice", "--dir", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: {tmp_path}/odd\\ndir: cannot create the key directory: {kind} is there; "
        "give a directory (created if missing)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd\ndir"]
