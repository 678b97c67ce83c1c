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
from pathlib import Path

import pytest
from _unreadable_file import fail_reading

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
    fail_reading(monkeypatch, out, call, error)
    with pytest.raises(OSError) as refused:
        replace_file(out, b'{"written": true}', 0o644)
    monkeypatch.undo()
    message = str(refused.value)
    assert f"a file that could not be checked ({named}" in message
    assert "cannot be read" not in message and "private key" not in message
    assert out.read_bytes() == held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]  # nothing left beside it
