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
