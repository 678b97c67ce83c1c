"""A warning left as the ``agentgate`` command ends, by a thread that began to log it while the
command's verb ran (review R74, r74-rev-cli): it is never lost. The command says what it has left
once, as its last lines, and takes no more; a record that arrives after that goes on as if no
command ran (Python's last-resort handler, in the command's own process). Runs the command in a
child process on a real SQLite store, with a real thread.
"""

from __future__ import annotations

from pathlib import Path

from test_cli_r74_warnings_threads import _python, _store_without_its_trigger

_LATE = """
import logging, sys, threading
from agentgate.cli import run

inside, go, workers = threading.Event(), threading.Event(), []

class Slow:
    '''An argument whose text is made only once the command has said its warnings.'''
    def __str__(self):
        inside.set()
        go.wait(60)  # a guard against a hang, not a timing: the program sets go itself
        return "keep"

class StartsAThread(logging.Handler):
    '''Runs in the command: on the audit log's warning, a thread begins to log one of its own.'''
    def emit(self, record):
        if not workers:
            warning = logging.getLogger("agentgate.store.leases").warning
            workers.append(threading.Thread(target=warning, args=("lease %s lost", Slow()), daemon=True))
            workers[0].start()
            inside.wait(60)

def said_its_last():
    go.set()
    workers[0].join()

import atexit
atexit.register(said_its_last)
logging.getLogger("agentgate.audit").addHandler(StartsAThread(logging.WARNING))
sys.argv = ["agentgate", *sys.argv[1:]]
run()
"""


def test_a_warning_left_after_the_command_said_its_last_is_not_lost(tmp_path: Path) -> None:
    """Review R74: a thread that began to log a warning while the verb ran (taken as the
    command's) and left it after the command had said its warnings put it in the ended
    command's list, which no one said again: lost. Rule: the command says its warnings a last
    time and takes no more; a later one is printed as if no command ran, once."""
    store = _store_without_its_trigger(tmp_path)
    done = _python(tmp_path, "-c", _LATE, "grant", "revoke", "a" * 64, "--store", store)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("lease keep lost") == 1, done.stderr
