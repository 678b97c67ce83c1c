"""``_forked.Worker`` (review R80), the multi-process tests' workers: started from a fork server
that outlives the test that started it, each still runs where and with what the test that starts
it has, as a ``subprocess`` would."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from _forked import Worker

SHOW = """
import json, os
print(json.dumps({"cwd": os.getcwd(), "env": {k: v for k, v in os.environ.items() if k.startswith("R80_")}}))
"""


def test_a_worker_has_the_starting_tests_environment_and_directory_not_the_fork_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R80_GONE", "from an earlier test")
    monkeypatch.chdir(tmp_path)
    assert Worker(tmp_path, SHOW, []).result()["env"] == {"R80_GONE": "from an earlier test"}
    # The fork server now exists, started with R80_GONE set and in tmp_path (if this test
    # started it): the next worker must not see either.
    monkeypatch.delenv("R80_GONE")
    monkeypatch.setenv("R80_NEW", "set since")
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    shown = Worker(tmp_path, SHOW, [], env={"R80_GIVEN": "by the caller"}).result()
    assert shown == {"cwd": str(here), "env": {"R80_NEW": "set since", "R80_GIVEN": "by the caller"}}


def test_a_workers_failure_its_kill_and_its_argv_read_as_a_subprocesss(tmp_path: Path) -> None:
    failed = Worker(tmp_path, "import sys\nprint('half', flush=True)\nraise RuntimeError('boom')\n", [])
    assert failed.wait() == 1 and failed.stdout() == "half\n" and "RuntimeError: boom" in failed.stderr()
    killed = Worker(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", [])
    assert killed.wait() == -signal.SIGKILL
    echo = Worker(tmp_path, "import json, sys\nprint(json.dumps(sys.argv[1:]))\n", ["a", "b c"])
    assert echo.wait() == 0 and echo.stdout() == '["a", "b c"]\n'
