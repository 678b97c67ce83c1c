"""An empty token file said to be empty: a defect found by review R70 following docs/cli.md as a new
user, failing before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main


@pytest.mark.parametrize("content", [b"", b"\n", b"\r\n"])
def test_an_empty_token_file_is_said_to_be_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    """Review R70: an empty token file was refused as `not an agentgate token: it does not start with 'ag1.'`.

    The usual way to get one is `agentgate grant delegate ... > child.tok` refused (exit 1): the
    shell makes the file and the command writes no token to it, by design (docs/cli.md). The error
    read as if the file held something else; it now says the file holds no token and why it may
    be so, one line, exit 2."""
    token = tmp_path / "child.tok"
    token.write_bytes(content)
    assert main(["grant", "inspect", str(token)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "child.tok: the file is empty: it holds no token" in err
    assert "does not start with" not in err
