"""Review R85: an AGENTGATE_DEMO_DIR the file system cannot even look at (a name longer than it
takes) ends the example with the one line naming the demo directory, and status 2, as one it
cannot make does (tests/test_examples_r63_environment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_examples_r63_environment import CHECKOUT, NAMES, _refused, _run
from test_examples_r63_environment import isolated as isolated  # the fixture


@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize("name", NAMES)
def test_a_demo_directory_name_too_long_to_look_at_is_named_in_one_line(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R85: the check whether the directory exists ran outside the try that names it, so
    a name too long for the file system (ENAMETOOLONG) ended the example with a traceback."""
    base = tmp_path / ("d" * 300)
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", str(base))
    line = _refused(*_run(CHECKOUT, name, capsys))
    assert line.startswith(f"cannot make the demo directory {base / name} (File name too long")
    assert "AGENTGATE_DEMO_DIR" in line
