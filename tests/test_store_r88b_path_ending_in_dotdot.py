"""A store path whose last part is ``..`` makes no directory either (review R88): until then only
the store's directory was checked for a ``..`` that steps out of a directory that does not exist,
so ``open_store("x/new/..")`` and ``store init --store x/new/..`` made ``x/new``, then refused the
path as a directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import StoreError
from agentgate.store import open_store


@pytest.mark.parametrize("last", [("..",), (".", "..")], ids=["new/..", "new/./.."])
def test_a_path_ending_in_a_step_up_out_of_no_directory_makes_nothing(
    tmp_path: Path, last: tuple[str, ...]
) -> None:
    named = tmp_path / "x" / "new" / Path(*last)
    with pytest.raises(StoreError, match=r"cannot create the SQLite store .*new/\.\.: .* names no directory"):
        open_store(named)
    assert list(tmp_path.iterdir()) == []


def test_store_init_at_such_a_path_makes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "store", "init", "--store", str(tmp_path / "x" / "new" / ".."))
    assert code == 2
    assert "names no directory" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_path_ending_in_a_step_up_out_of_a_directory_is_refused_as_one(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    with pytest.raises(StoreError, match=r"it is a directory"):
        open_store(tmp_path / "there" / "..")
    assert [p.name for p in tmp_path.iterdir()] == ["there"]
