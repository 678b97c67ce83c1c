"""``save_key`` into a ``DIR`` with ``..`` whose path the file system cannot look up (review R88,
third regression pass): ``unmade_above`` asked ``Path.is_dir``, which raises the ``OSError`` of a
name too long (or of a directory that may not be searched) instead of answering, and that call
stood before the ``try`` that turns an ``OSError`` into ``KeyFileError``: a bare ``OSError`` out of
``agentgate keys new``. ``unmade_above`` now answers "cannot tell" (``None``) and the making of the
directory reports the same error as a ``KeyFileError``, as a long ``DIR`` without ``..`` is."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate._paths import unmade_above
from agentgate.errors import KeyFileError, StoreError
from agentgate.keys import SigningKey, save_key
from agentgate.store import open_store

_LONG = "A" * 300
"""A path part longer than any file system's name limit (255 bytes): ``ENAMETOOLONG``."""


@pytest.mark.parametrize("after", [(), ("k",)], ids=["LONG/..", "LONG/../k"])
def test_a_key_directory_too_long_to_look_up_is_a_key_file_error(
    tmp_path: Path, after: tuple[str, ...]
) -> None:
    directory = tmp_path / _LONG / ".." / Path(*after)
    with pytest.raises(KeyFileError, match=r"cannot create the key directory: File name too long"):
        save_key(SigningKey.generate(), directory, "me")
    assert list(tmp_path.iterdir()) == []


def test_unmade_above_cannot_tell_for_a_name_too_long(tmp_path: Path) -> None:
    assert unmade_above(tmp_path / _LONG / "..") is None


def test_a_store_path_too_long_to_look_up_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="File name too long"):
        open_store(tmp_path / _LONG / ".." / "s.db")
    assert list(tmp_path.iterdir()) == []
