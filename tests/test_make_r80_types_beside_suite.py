"""`make test` checks the types while the suite runs (review R80): run in a scratch copy of the
Makefile, with the two commands replaced by scripts (``MYPY=``, ``PYTEST=`` on make's command
line) and ruff by one that passes. Either failing fails the command; mypy's report comes after
the suite's; Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_examples_r59_make_demo import _installed, checkout

__all__ = ["checkout"]  # the fixture, imported for this file's tests


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return f"./{path.name}"


@pytest.fixture
def ready(checkout: Path) -> Path:
    _installed(checkout, ".installed", ".installed-demo")
    _script(checkout / ".venv" / "bin" / "ruff", "exit 0\n")
    return checkout


def _make_test(checkout: Path, mypy: str, pytest_: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "test", f"MYPY={mypy}", f"PYTEST={pytest_}"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("types_rc", "tests_rc", "passes"), [(0, 0, True), (1, 0, False), (0, 1, False)])
def test_make_test_fails_when_either_fails_and_prints_mypys_report_after_the_suites(
    ready: Path, types_rc: int, tests_rc: int, passes: bool
) -> None:
    mypy = _script(ready / "types", f"echo 'types: report'\nexit {types_rc}\n")
    # The suite outlasts the type check: its output still comes first.
    suite = _script(ready / "suite", f"sleep 0.5\necho 'suite: report'\nexit {tests_rc}\n")
    done = _make_test(ready, mypy, suite)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
    out = done.stdout
    assert out.index("suite: report") < out.index("types: report"), out


def test_ctrl_c_during_make_test_leaves_no_type_check_running(ready: Path) -> None:
    """Without the recipe's trap, mypy (started with ``&`` by a non-interactive shell, so
    ignoring SIGINT) ran on for its 40 s after the suite was stopped."""
    mypy = _script(ready / "types", "echo $$ > types.pid\nexec sleep 60\n")
    suite = _script(ready / "suite", "touch suite.started\nexec sleep 60\n")
    make = subprocess.Popen(
        ["make", "--no-print-directory", "test", f"MYPY={mypy}", f"PYTEST={suite}"],
        cwd=ready,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while not ((ready / "types.pid").exists() and (ready / "suite.started").exists()):
            assert time.monotonic() < deadline, "make test never started both"
            time.sleep(0.02)
        types = int((ready / "types.pid").read_text())
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C at a terminal sends
        assert make.wait(timeout=30) != 0
        deadline = time.monotonic() + 10
        while _alive(types):
            assert time.monotonic() < deadline, "the type check still runs after Ctrl-C"
            time.sleep(0.02)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
        if (ready / "types.pid").exists() and _alive(pid := int((ready / "types.pid").read_text())):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is not running; it is reaped by its parent or by init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
