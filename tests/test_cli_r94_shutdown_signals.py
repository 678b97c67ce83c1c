"""Review R94 of the console-script entry ``agentgate.cli:run``: a signal in the interpreter's
shutdown, after the command has ended.

``run`` put back the handlers it found (SIG_DFL for SIGTERM, Python's for SIGINT) as soon as
``main`` returned, and the interpreter then shuts down: a SIGTERM or Ctrl-C
there ended a command whose work was done and whose output was written as a death by that signal,
nothing said. Each test runs a real child interpreter whose ``atexit`` hook (run in that shutdown,
after ``run`` has raised its ``SystemExit``) sends the signal to its own process: deterministic,
no sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PROGRAM = """\
import atexit, os, signal, sys
from agentgate.cli import run

def signalled():
    os.kill(os.getpid(), signal.{signal})
    for _ in range(1000):
        pass  # where the interpreter runs the signal's Python handler, if it has one

atexit.register(signalled)
sys.argv = ["agentgate", "policy", "schema"]
run()
"""


def _child(cwd: Path, program: str) -> subprocess.CompletedProcess[str]:
    """``program`` run by a child interpreter that imports this checkout's ``agentgate``."""
    return subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
    )


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_after_the_command_ended_leaves_its_exit_code(tmp_path: Path, name: str) -> None:
    """Review R94: a SIGTERM after the command ended killed it (-15, shell 143), a Ctrl-C printed
    a traceback from the shutdown. Rule: once the command has ended and its output is flushed,
    SIGINT and SIGTERM are ignored: it exits with its own code, its output whole, nothing more on
    standard error. SIGHUP too since review R96, when ``serve`` began to stop on it: one after
    its gate closed killed the process (-1), every outcome committed."""
    done = _child(tmp_path, _PROGRAM.format(signal=name))
    assert (done.returncode, done.stderr) == (0, ""), (done.returncode, done.stderr)
    assert done.stdout.startswith("{") and done.stdout.endswith("}\n"), done.stdout[-200:]


_INTERRUPTED_AT_IMPORT = """\
class _SignalWhenLookedUp:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "agentgate.cli.main":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        return None

sys.meta_path.insert(0, _SignalWhenLookedUp())
run()
"""


def test_a_terminated_command_keeps_its_code_through_the_shutdown(tmp_path: Path) -> None:
    """Review R94: the same for a command that a SIGTERM ended (its line, 143): a second one in
    the shutdown killed it by the signal. Rule: exit 143, its one line."""
    program = _PROGRAM.format(signal="SIGTERM").replace("run()\n", _INTERRUPTED_AT_IMPORT)
    done = _child(tmp_path, program)
    assert (done.returncode, done.stdout, done.stderr) == (143, "", "agentgate: terminated\n")
