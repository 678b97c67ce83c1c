"""The examples whose reader goes away (``make demo | head``) or that a person interrupts (Ctrl-C)
end with a status and at most one line, never a traceback (review R59)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
def test_an_example_whose_reader_went_away_ends_with_141_and_no_traceback(name: str, tmp_path: Path) -> None:
    """Review R59: `python examples/NAME | head -1` ended with a BrokenPipeError ("Exception ignored ...") and status 120."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the example writes a line
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_OPENAI_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=300,
    )
    os.close(write)
    assert result.stderr == ""
    assert result.returncode == 141  # as a command killed by SIGPIPE shows in a shell, never 0


def test_an_interrupted_example_says_so_in_one_line(tmp_path: Path) -> None:
    """Review R59: Ctrl-C during an example ended it with a KeyboardInterrupt traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_OPENAI_")}
    with subprocess.Popen(
        [sys.executable, str(EXAMPLES / "support_agent.py")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env, PYTHONUNBUFFERED="1"),
    ) as example:
        assert example.stdout is not None
        example.stdout.readline()  # its first line: it is running
        example.send_signal(signal.SIGINT)
        _, err = example.communicate(timeout=120)
    assert err == "interrupted\n", err[-3000:]
    assert example.returncode == 130
