"""Review R96: once a command has ended, SIGHUP is ignored with SIGINT and SIGTERM for the
interpreter's shutdown (``agentgate.cli._ignored_until_exit``): ``serve`` now stops on SIGHUP,
and one arriving after its gate closed would have killed the process, every outcome committed,
with a death by signal for its exit status."""

import signal
import subprocess
import sys

SCRIPT = """
import signal
from agentgate.cli import _ignored_until_exit
print(_ignored_until_exit())
print(sorted(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
             if signal.getsignal(s) == signal.SIG_IGN))
"""


def test_sighup_is_ignored_with_sigint_and_sigterm_once_the_command_has_ended() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == [
        "True",
        str(sorted(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))),
    ]
