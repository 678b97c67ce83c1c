"""Review R91b of the file outputs (agentgate/keys.py, ``replace_file``): the regular file at an
output's path is opened, and read, to see whether it holds what no output may replace
(``_irreplaceable``). Since review R91 one that cannot be opened is refused, as it may hold a
private key; but every error was told as "a file that cannot be read (it may hold a private
key)", an I/O error on a network file system or no file descriptor free included, which sent the
user to check the file's permissions. Such a file is still refused (it was not checked), and the
refusal now names the error; a refused read (EACCES, EPERM) is told as before
(tests/test_http_r91_unreadable_out_kept.py).

The errors are made certain here: ``os.open`` or ``os.read`` of that one file fails with them."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from agentgate.keys import replace_file


@pytest.mark.parametrize("call", ["open", "read"])
@pytest.mark.parametrize(
    ("error", "named"),
    [(errno.EIO, "Input/output error"), (errno.EMFILE, "Too many open files"), (errno.ESTALE, "Stale")],
)
@pytest.mark.parametrize("held", [b"", b"a schema"], ids=["empty", "not_empty"])
def test_a_file_that_could_not_be_checked_is_kept_and_the_refusal_names_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, error: int, named: str, held: bytes
) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(held)
    real_open, real_read = os.open, os.read
    opened: set[int] = set()

    def failing_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(out) and call == "open":
            raise OSError(error, os.strerror(error), str(path))
        fd = real_open(path, *args, **kwargs)
        if os.fspath(path) == str(out):
            opened.add(fd)
        return fd

    def failing_read(fd: int, size: int) -> bytes:
        if fd in opened:
            raise OSError(error, os.strerror(error))
        return real_read(fd, size)

    monkeypatch.setattr(os, "open", failing_open)
    monkeypatch.setattr(os, "read", failing_read)
    with pytest.raises(OSError) as refused:
        replace_file(out, b'{"written": true}', 0o644)
    monkeypatch.undo()
    message = str(refused.value)
    assert f"a file that could not be checked ({named}" in message
    assert "cannot be read" not in message and "private key" not in message
    assert out.read_bytes() == held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]  # nothing left beside it
