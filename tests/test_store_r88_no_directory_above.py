"""Opening a new SQLite store at a path that goes up (``..``) out of a directory that does not
exist makes no directory (review R88): the kernel reads ``..`` after what comes before it, so
``x/new/../s.db`` names no file until ``x/new`` is made. Until then ``open_store`` made ``x/new``
(as ``mkdir -p`` of the store's directory would), then the store beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import open_store


def test_a_directory_the_path_goes_up_out_of_is_not_made(tmp_path: Path) -> None:
    named = tmp_path / "new" / ".." / "s.db"
    with pytest.raises(
        StoreError, match=r"cannot create the store directory .*new/\.\.: .* names no directory"
    ):
        open_store(named)
    assert list(tmp_path.iterdir()) == []


def test_directories_after_the_last_parent_step_are_made(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    store = open_store(tmp_path / "there" / ".." / "made" / "deeper" / "s.db")
    store.close()
    assert (tmp_path / "made" / "deeper" / "s.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made", "there"]
