"""A warning that agentgate logs from a thread other than the command's own, in the ``agentgate``
command's process (``python -m agentgate``, the console script): a thread the command's code
started, or a library's worker thread running agentgate's code. Such a thread does not run in the
command's context (``threading.Thread`` copies no context variable), so until review R74 its
record was handed on as if no command ran: Python's last-resort handler printed it at once, bare
(no ``agentgate: warning:``), among the command's output. Each test runs the command in a child
process on a real SQLite store, with a real thread.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_THREAD_WARNS = """
import logging, sys, threading
from agentgate.cli import run

class StartsAThread(logging.Handler):
    '''Runs in the command: on the audit log's warning, a worker thread logs one of its own.'''
    def emit(self, record):
        worker = threading.Thread(
            target=logging.getLogger("agentgate.store.leases").warning, args=("lease %r lost", "keep")
        )
        worker.start()
        worker.join()

logging.getLogger("agentgate.audit").addHandler(StartsAThread(logging.WARNING))
sys.argv = ["agentgate", *sys.argv[1:]]
run()
"""


def _python(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("AGENTGATE_LOG_PREVIOUS_KEYS", None)
    environment.pop("AGENTGATE_STORE", None)
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _store_without_its_trigger(tmp_path: Path) -> str:
    """A SQLite store holding one revocation, its log's ``audit_log_no_update`` trigger dropped:
    the next command that writes the log puts it back and logs a warning."""
    store = str(tmp_path / "agentgate.db")
    for argv in (["store", "init"], ["grant", "revoke", "b" * 64]):
        done = _python(tmp_path, "-m", "agentgate", *argv, "--store", store)
        assert done.returncode == 0, done.stderr
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute("DROP TRIGGER audit_log_no_update")
    return store


def test_a_threads_warning_is_said_once_as_the_commands(tmp_path: Path) -> None:
    """Review R74: a WARNING record that a thread started by the command logs (here a worker thread
    started while ``grant revoke`` runs) was printed at once by Python's last-resort handler,
    bare: ``lease 'keep' lost``. Rule: in the command's own process it is the command's warning,
    said once in the command's form, ``agentgate: warning: lease 'keep' lost``, with its others,
    when it ends; no bare line; exit code unchanged."""
    store = _store_without_its_trigger(tmp_path)
    done = _python(tmp_path, "-c", _THREAD_WARNS, "grant", "revoke", "a" * 64, "--store", store)
    lines = done.stderr.splitlines()
    assert done.returncode == 0, lines
    assert lines.count("agentgate: warning: lease 'keep' lost") == 1, lines
    assert not any(line.startswith("lease") for line in lines), lines
    warned = [line for line in lines if "protection trigger" in line]
    assert len(warned) == 2 and all(line.startswith("agentgate: warning: ") for line in warned), lines
    assert all(line.startswith(("agentgate: warning: ", "note: ")) for line in lines), lines
