"""Review R77: a file SQLite opens and then refuses (not a database) was left open by the
refusal: the connection stayed referenced by the error's traceback, an open file until the error
was collected (on Python 3.13, a ``ResourceWarning: unclosed database`` then)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore


def _open_at(path: Path) -> list[str]:
    """This process's descriptors open on ``path``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                found.append(fd)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
def test_a_file_that_is_no_database_is_closed_when_refused(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "agentgate.db"
    path.write_bytes(b"this is not an SQLite database, only text that is long enough" * 100)
    with pytest.raises(StoreError) as refused:
        SQLiteStore(path, read_only=read_only, create=not read_only)
    assert "not a database" in str(refused.value)
    # The error is still held here, and with it the frames of the refusal.
    assert refused.value.__traceback__ is not None
    assert _open_at(path.resolve()) == []
