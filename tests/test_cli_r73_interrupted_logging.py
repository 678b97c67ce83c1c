"""The logging change a command makes (``agentgate.cli._warnings``: the ``agentgate`` logger's
records taken from propagation while any command runs) when an interruption lands in the middle
of making or undoing it: Ctrl-C, or SIGTERM raising ``Terminated``, can land between any two lines
of Python, and ``main`` turns either into exit 130 or 143, so the embedding program goes on.

Each test runs ``main`` in a fresh interpreter, whose logging it may leave changed, and lands the
interruption where it means to through a trace function: the exception a trace function raises is
raised in the frame it traces, as a signal handler's is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_INTERRUPTED = """
import io, json, logging, sys
from agentgate.cli import _warnings
from agentgate.cli.main import main

written = io.StringIO()
logging.getLogger().addHandler(logging.StreamHandler(written))
target, at = getattr(_warnings, sys.argv[1]).__code__, sys.argv[2]

def interrupt(frame, event, arg):
    if event == at and frame.f_code is target:
        sys.settrace(None)
        raise KeyboardInterrupt
    return interrupt if frame.f_code is target else None

codes = []
sys.settrace(interrupt)
codes.append(main(["audit", "show", "--store", "none.db"]))
sys.settrace(None)
codes.append(main(["audit", "show", "--store", "none.db"]))
agentgate = logging.getLogger("agentgate")
logging.getLogger("agentgate.gate").warning("logged after the commands")
print(json.dumps({
    "codes": codes,
    "propagate": agentgate.propagate,
    "handlers": len(agentgate.handlers),
    "root": written.getvalue(),
}))
"""


def _interrupted_at(function: str, event: str, tmp_path: Path) -> dict[str, object]:
    """What the program sees after a ``main`` interrupted as ``function`` of ``_warnings`` is
    called (``event`` "call") or returns ("return"), then a ``main`` that runs to its end, then a warning of agentgate's logged."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("AGENTGATE_STORE", None)
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED, function, event],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return report


def test_an_interruption_as_the_records_are_given_back_does_not_cut_agentgate_off_for_good(
    tmp_path: Path,
) -> None:
    """Review R73: a Ctrl-C as the last command gave the ``agentgate`` logger's records back left
    them taken (the count of commands said none ran); the next command took them again and kept
    "does not propagate" as what to restore, so from then on no agentgate record reached the
    program's root handler. Rule: once a later command has ended, the logger propagates and has
    no handler of the CLI's, and a warning agentgate logs reaches the root handler."""
    report = _interrupted_at("_give_records_back", "call", tmp_path)
    assert report == {
        "codes": [130, 2],
        "propagate": True,
        "handlers": 0,
        "root": "logged after the commands\n",
    }, report


def test_an_interruption_as_the_records_are_taken_does_not_cut_agentgate_off_for_good(
    tmp_path: Path,
) -> None:
    """Review R73: the same when the interruption lands as the first command has taken the records,
    before it is counted as running: no command gave them back. Rule: as above."""
    report = _interrupted_at("_take_records", "return", tmp_path)
    assert report == {
        "codes": [130, 2],
        "propagate": True,
        "handlers": 0,
        "root": "logged after the commands\n",
    }, report
