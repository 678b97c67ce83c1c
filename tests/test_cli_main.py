"""The `agentgate` command's entry point (agentgate/cli/main.py, agentgate/__main__.py): how it is
run, and its errors as one line on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_log import ALICE_DID

from agentgate.cli.main import main


def test_python_dash_m_agentgate_runs_the_command() -> None:
    # In a container without the console script on PATH, `python -m agentgate` is the way to run
    # it; agentgate has no __main__.py, so it fails ("is a package and cannot be directly executed").
    done = subprocess.run(
        [sys.executable, "-m", "agentgate", "policy", "schema"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("{")


def test_an_error_quoting_a_newline_is_one_line_with_white_space_runs_made_one_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills m2: ``_one_line`` cutting the text to 2,000 characters without collapsing its
    white space (a newline then shows as a ``\\n`` escape, and runs of spaces stay). Rule: an
    error is one line on stderr, each run of white space in it (newlines included) one space."""
    # A file that exists (a name with a line break that names no file is taken for a key's own
    # text since review R48, and not quoted at all), holding no key.
    odd = tmp_path / "no\n   key"
    odd.write_text("not a key\n")
    odd.chmod(0o600)
    code = main(
        ["grant", "issue", "--issuer", str(odd), "--to", ALICE_DID, "--allow", "tool:t", "--ttl", "1h"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n")
    # Since review R55 the library quotes the path with its line break escaped (keys.shown_path):
    # the escape stays, the run of spaces after it is one space.
    assert f"{tmp_path}/no\\n key: not a PKCS#8 PEM private key" in err
    assert "  " not in err
