"""A new SQLite store makes each missing directory above its file 0700, whatever the umask, and
takes back the directories it made when the file then cannot be made (review R89). Until then
``mkdir -p`` of the store's directory gave only the innermost directory 0700 and the ones above
it the umask's mode (0777 under umask 000, 0775 under 002), so anyone (or the group) could
rename the store holding grant tokens and the audit log out of its place; and a store that could
not be created left its directories behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import StoreError
from agentgate.store import open_store


@pytest.fixture(params=[0o000, 0o002], ids=["umask-000", "umask-002"])
def loose_umask(request: pytest.FixtureRequest) -> Iterator[None]:
    old = os.umask(request.param)
    try:
        yield
    finally:
        os.umask(old)


def _modes(top: Path, *, directories_only: bool = False) -> dict[str, int]:
    """The mode of each path under ``top`` (each directory only, if ``directories_only``), by its
    name relative to ``top`` (here and in test_keys_r89_umask_parents)."""
    return {
        str(path.relative_to(top)): stat.S_IMODE(path.lstat().st_mode)
        for path in sorted(top.rglob("*"))
        if path.is_dir() or not directories_only
    }


def test_every_missing_directory_above_a_new_store_is_private(tmp_path: Path, loose_umask: None) -> None:
    store = open_store(tmp_path / "x" / "y" / "z" / "s.db")
    store.close()
    modes = _modes(tmp_path)
    assert {name: mode for name, mode in modes.items() if "s.db" not in name} == {
        "x": 0o700,
        "x/y": 0o700,
        "x/y/z": 0o700,
    }
    assert modes["x/y/z/s.db"] == 0o600


def test_store_init_under_a_loose_umask_makes_private_directories(
    tmp_path: Path, loose_umask: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "store", "init", "--store", str(tmp_path / "x" / "y" / "z" / "s.db"))
    assert (code, err) == (0, "")
    assert [mode for name, mode in _modes(tmp_path).items() if "s.db" not in name] == [0o700] * 3


def test_an_existing_directory_keeps_its_mode(tmp_path: Path, loose_umask: None) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o755)
    open_store(tmp_path / "shared" / "x" / "s.db").close()
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "shared" / "x").stat().st_mode) == 0o700


def test_a_store_file_that_cannot_be_made_leaves_no_directory_made_for_it(
    tmp_path: Path, loose_umask: None
) -> None:
    """``x`` and ``x/y`` are made, then the file's name is too long: both go again, and a
    directory that was there is left."""
    (tmp_path / "there").mkdir()
    with pytest.raises(StoreError, match="File name too long"):
        open_store(tmp_path / "there" / "x" / "y" / ("a" * 300))
    assert [path.name for path in tmp_path.rglob("*")] == ["there"]


def test_a_directory_that_cannot_be_made_takes_back_those_made_above_it(
    tmp_path: Path, loose_umask: None
) -> None:
    with pytest.raises(StoreError, match=r"cannot create the store directory .*: File name too long"):
        open_store(tmp_path / "x" / "y" / ("a" * 300) / "s.db")
    assert list(tmp_path.iterdir()) == []


def test_a_path_no_file_name_can_hold_is_a_store_error(tmp_path: Path) -> None:
    """A lone surrogate (not one ``surrogateescape`` made): a bare ``UnicodeEncodeError``
    until review R89."""
    with pytest.raises(StoreError, match=r"holds a character no file name can hold \(a lone surrogate\)"):
        open_store(tmp_path / "x\ud800" / "s.db")
    assert list(tmp_path.iterdir()) == []
