"""Review R92b of ``replace_file(..., exclusive=True)`` (agentgate/keys.py, ``_put``): where the
empty file taken at the name was gone when the data was put (its owner removed it while
``grant issue`` recorded the grant), the data was renamed there (``os.replace``), so a file put
there between that look and the rename was replaced without a word. It is linked in now, as in
place of a placeholder, which fails rather than replace what is there (``FilledFile``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_keys_r92_out_name_taken import _leftovers, empty_out  # noqa: F401 (the fixture)

from agentgate.keys import FilledFile, replace_file


def test_a_file_put_where_the_taken_one_was_removed_is_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    empty_out: Path,  # noqa: F811 (the fixture)
) -> None:
    out_file = empty_out
    real_lstat = os.lstat
    put: list[bool] = []

    def theirs_put_after_the_look(looked_at: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        try:
            return real_lstat(looked_at, *args, **kwargs)
        except FileNotFoundError:
            if Path(os.fspath(looked_at)) == out_file and not put:
                out_file.write_bytes(b"theirs\n")  # its owner writes it again, just after the look
                put.append(True)
            raise

    monkeypatch.setattr(os, "lstat", theirs_put_after_the_look)
    with pytest.raises(FilledFile):
        replace_file(out_file, b"ours\n", 0o600, out_file.unlink, exclusive=True)
    monkeypatch.undo()
    assert put == [True]
    assert out_file.read_bytes() == b"theirs\n"
    assert _leftovers(tmp_path) == []


def test_a_taken_file_removed_before_the_data_is_put_is_written(
    tmp_path: Path,
    empty_out: Path,  # noqa: F811 (the fixture)
) -> None:
    out_file = empty_out
    replace_file(out_file, b"ours\n", 0o600, out_file.unlink, exclusive=True)
    assert out_file.read_bytes() == b"ours\n"
    assert out_file.stat().st_mode & 0o777 == 0o600
    assert _leftovers(tmp_path) == []
