"""Ctrl-C at any moment of an example (review R62): while it imports langgraph and langchain,
while the agents run (tests/test_examples_r63_interrupt.py), and while it writes its summary
(tests/test_examples_r63b_interrupt.py). Each ends with the one line ``interrupted`` and status
130, never a traceback, and what the run wrote to its store still verifies (``agentgate audit
verify``, the command the example itself points to)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _examples import EXAMPLES, run_example

NAMES = ["research_team.py", "support_agent.py"]


def _start(name: str, workdir: Path, *python_options: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_OPENAI_")}
    return subprocess.Popen(
        [sys.executable, *python_options, str(EXAMPLES / name)],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env, PYTHONUNBUFFERED="1"),
    )


def _interrupt(example: subprocess.Popen[str]) -> tuple[str, str]:
    example.send_signal(signal.SIGINT)
    return example.communicate(timeout=120)


def _store(name: str, workdir: Path) -> Path:
    return workdir / ".agentgate" / "demo" / name.removesuffix(".py") / "agentgate.db"


@pytest.mark.parametrize("name", NAMES)
def test_ctrl_c_while_the_example_imports_says_interrupted(name: str, tmp_path: Path) -> None:
    """Review R62: Ctrl-C in an example's first seconds, while it imported langgraph and
    langchain (before its first line), printed a KeyboardInterrupt traceback and ended by the
    signal (status -2), not with ``interrupted`` and 130."""
    # -X importtime writes a line to stderr as each module is imported: the signal is sent once
    # langchain is being imported, whatever the machine's speed.
    with _start(name, tmp_path, "-X", "importtime") as example:
        assert example.stderr is not None
        while "langchain" not in (line := example.stderr.readline()):
            assert line, "the example imported no langchain"
        out, err = _interrupt(example)
    said = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert out == ""  # interrupted before its first line
    assert said == ["interrupted"], err[-3000:]
    assert example.returncode == 130
    assert not _store(name, tmp_path).exists()  # nothing was made


def test_an_example_run_inside_a_test_leaves_its_ctrl_c_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: an example run in a test's own process (``runpy``, as the endpoint tests run
    them; runpy sets ``sys.argv[0]`` to the example) left its Ctrl-C handler there: the pytest-xdist
    worker, which sends itself SIGINT as it stops, printed ``interrupted`` and ended with 130."""
    before = signal.getsignal(signal.SIGINT)
    for variable in ("AGENTGATE_OPENAI_BASE_URL", "AGENTGATE_DEMO_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    status, out, err = run_example(EXAMPLES / "support_agent.py", capsys)
    assert status == 0, out + err
    assert signal.getsignal(signal.SIGINT) is before
