"""A SQLite store opened by a process whose working directory was removed (review R87b). Since
review R87 the store made its path absolute with ``os.path.join(os.getcwd(), path)``, which asks
for the working directory even for an absolute path: a store named from the root then failed to
open with a bare ``FileNotFoundError`` (the CLI said "cannot write the output", exit 2), where
``os.path.abspath`` had opened it. A relative path cannot be placed without the working
directory: that is a ``StoreError`` saying so, before anything is created."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.grants import GrantRepository

GRANT = "a" * 64


@pytest.fixture
def removed_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory, a directory removed after the process entered it (restored after)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    return gone


@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "read-only"])
def test_an_absolute_store_path_opens_without_a_working_directory(
    tmp_path: Path, removed_cwd: Path, read_only: bool
) -> None:
    db = tmp_path / "store" / "agentgate.db"
    db.parent.mkdir()
    with contextlib.closing(SQLiteStore(db)) as store:
        assert GrantRepository(store).revoke(GRANT, now=1_700_000_000)
    with pytest.raises(OSError):
        os.getcwd()
    with contextlib.closing(SQLiteStore(db, create=False, read_only=read_only)) as store:
        assert GrantRepository(store).revoked([GRANT]) == {GRANT}


def test_a_new_store_at_an_absolute_path_is_made_without_a_working_directory(
    tmp_path: Path, removed_cwd: Path
) -> None:
    db = tmp_path / "new" / "agentgate.db"
    with contextlib.closing(SQLiteStore(db)) as store:
        assert GrantRepository(store).revoke(GRANT, now=1_700_000_000)
    with contextlib.closing(SQLiteStore(db, create=False)) as store:
        assert GrantRepository(store).revoked([GRANT]) == {GRANT}


@pytest.mark.parametrize("create", [True, False], ids=["create", "existing"])
def test_a_relative_store_path_without_a_working_directory_is_a_store_error(
    tmp_path: Path, removed_cwd: Path, create: bool
) -> None:
    # ``..`` is still read in a removed directory: the store would be made in tmp_path
    relative = "../made/agentgate.db"
    with pytest.raises(StoreError) as caught:
        SQLiteStore(relative, create=create)
    message = str(caught.value)
    assert relative in message
    assert "working directory cannot be found" in message
    assert "absolute path" in message
    assert not (tmp_path / "made").exists()  # nothing created
