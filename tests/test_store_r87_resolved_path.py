"""A SQLite store named through a symbolic link opens the file the kernel finds at that path, and
reads that file's write-ahead log (review R87). Until then the path was made absolute with
``os.path.abspath``, which drops ``link/..`` as text: ``D/current/../agentgate.db``, with
``current`` a link to ``D/state/run``, was checked at ``D/state/agentgate.db`` (the kernel's
reading) and opened, or created empty, at ``D/agentgate.db``, so a grant revoked in the store was
allowed, even with ``create=False``. And a store opened to read only through a link to its file
looked for the ``-wal`` beside the link, where SQLite never puts it, found none, and read the file
``immutable`` without the commits its log still held."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, open_store
from agentgate.store._existing import empty_file
from agentgate.store.grants import GrantRepository

GRANT = "a" * 64


def _release_layout(tmp_path: Path) -> tuple[Path, str]:
    """``D/state/agentgate.db``, a store in which ``GRANT`` is revoked, and the same file named as
    ``D/current/../agentgate.db`` with ``current`` a link to ``D/state/run``."""
    (tmp_path / "state" / "run").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "state" / "run")
    with contextlib.closing(SQLiteStore(tmp_path / "state" / "agentgate.db")) as store:
        assert GrantRepository(store).revoke(GRANT, now=1_700_000_000, reason="compromised")
    return tmp_path / "state" / "agentgate.db", f"{tmp_path}/current/../agentgate.db"


@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "read-only"])
def test_a_path_with_dot_dot_after_a_link_opens_the_store_the_kernel_finds(
    tmp_path: Path, read_only: bool
) -> None:
    real, dotted = _release_layout(tmp_path)
    assert os.path.samefile(dotted, real)
    with contextlib.closing(open_store(dotted, create=False, read_only=read_only)) as store:
        assert GrantRepository(store).revoked([GRANT]) == {GRANT}
    assert not (tmp_path / "agentgate.db").exists()  # nothing made where abspath pointed


def test_a_store_named_with_dot_dot_after_a_link_writes_into_that_store(tmp_path: Path) -> None:
    real, dotted = _release_layout(tmp_path)
    other = "b" * 64
    with contextlib.closing(open_store(dotted, create=False)) as store:
        assert GrantRepository(store).revoke(other, now=1_700_000_001)
    with contextlib.closing(SQLiteStore(real, create=False)) as store:
        assert GrantRepository(store).revoked([GRANT, other]) == {GRANT, other}
    assert not (tmp_path / "agentgate.db").exists()


def test_a_new_store_named_with_dot_dot_after_a_link_is_made_where_the_kernel_finds_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "state" / "run").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "state" / "run")
    with contextlib.closing(open_store(f"{tmp_path}/current/../new.db")) as store:
        assert GrantRepository(store).revoke(GRANT, now=1_700_000_000)
    made = tmp_path / "state" / "new.db"
    assert made.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "new.db").exists()
    with contextlib.closing(SQLiteStore(made, create=False)) as store:
        assert GrantRepository(store).revoked([GRANT]) == {GRANT}


def test_a_read_only_store_named_through_a_link_reads_what_the_running_writers_log_holds(
    tmp_path: Path,
) -> None:
    """A gateway has the store open through the link: its revocation is only in the ``-wal``
    beside the link's target. Opened to read only through the same link, the store reads it."""
    (tmp_path / "data").mkdir()
    real, link = tmp_path / "data" / "agentgate.db", tmp_path / "agentgate.db"
    link.symlink_to(real)
    with contextlib.closing(SQLiteStore(link)) as running:
        assert GrantRepository(running).revoke(GRANT, now=1_700_000_000)
        assert Path(f"{real}-wal").exists() and not Path(f"{link}-wal").exists()
        with contextlib.closing(open_store(link, create=False, read_only=True)) as reader:
            assert GrantRepository(reader).revoked([GRANT]) == {GRANT}


def test_an_empty_file_is_told_by_the_log_beside_the_file_a_link_names(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    real, link = tmp_path / "data" / "agentgate.db", tmp_path / "agentgate.db"
    real.touch()
    link.symlink_to(real)
    assert empty_file(link)
    Path(f"{real}-wal").write_bytes(b"\x00" * 32)  # commits not yet in the file itself
    assert not empty_file(link)


def test_a_link_pointed_at_another_file_while_in_use_still_stops_the_writes(tmp_path: Path) -> None:
    """The link is resolved once to open the file; whether the path still names that file is
    read through the link at every commit, as before."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    link = tmp_path / "agentgate.db"
    link.symlink_to(tmp_path / "one" / "agentgate.db")
    with contextlib.closing(SQLiteStore(link)) as store:
        assert GrantRepository(store).revoke(GRANT, now=1_700_000_000)
        SQLiteStore(tmp_path / "two" / "agentgate.db").close()
        link.unlink()
        link.symlink_to(tmp_path / "two" / "agentgate.db")
        with pytest.raises(StoreError, match="was removed, moved or replaced while in use"):
            GrantRepository(store).revoke("b" * 64, now=1_700_000_001)
