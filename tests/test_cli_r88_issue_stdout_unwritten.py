"""``grant issue`` whose token cannot be written to standard output records no grant, as with
``--out`` (review R88): before, the grant was recorded first, then the write failed (exit 2,
"cannot write the output"), and the store kept a grant whose token no one had."""

from __future__ import annotations

import errno
import io
import sqlite3
from pathlib import Path

import pytest
from _cli import cli

from agentgate.cli.main import main


class _Unwritable(io.StringIO):
    """A standard output that fails with ``error`` when what it holds is flushed."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def flush(self) -> None:
        if self.getvalue():
            raise self.error


def _grants(store: Path) -> int:
    with sqlite3.connect(store) as db:
        count: int = db.execute("SELECT count(*) FROM agentgate_grants").fetchone()[0]
    return count


@pytest.fixture
def issue(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    for name in ("root", "alice"):
        code, _, err = cli(capsys, "keys", "new", name, "--dir", str(tmp_path))
        assert code == 0, err
    code, _, err = cli(capsys, "store", "init")
    assert code == 0, err
    root, alice = str(tmp_path / "root.key"), str(tmp_path / "alice.pub")
    return ["grant", "issue", "--issuer", root, "--to", alice, "--allow", "tool:x", "--ttl", "1h"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), 2),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 141),
    ],
    ids=["full-disk", "reader-gone"],
)
def test_a_token_not_written_to_stdout_records_no_grant(
    issue: list[str], error: OSError, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout", _Unwritable(error))
    assert main(issue) == code
    assert _grants(tmp_path / "s.db") == 0


def test_a_token_written_to_stdout_is_recorded(
    issue: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *issue)
    assert code == 0, err
    assert out.count("\n") == 1
    assert _grants(tmp_path / "s.db") == 1
