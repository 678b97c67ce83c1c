"""A Ctrl-C or SIGTERM that lands while a native extension module initialises is held back until
the module is loaded, then ends the command as any other does (``agentgate: interrupted``, exit
130; ``terminated``, 143). Until review R88 the handler's exception left orjson's initialisation
(which imports Python modules of its own) and crashed the interpreter: SIGSEGV, exit 139,
nothing said.

Each test runs ``agentgate.cli:run`` in a child interpreter whose ``_imp.create_dynamic`` (what
the extension loader calls to initialise a native module) sends the signal as orjson begins to
initialise and then runs Python code, as orjson's own initialisation does: deterministic, no
sleep. It writes ``initialised`` only if that code ran to its end, with no exception in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """\
import _imp, os, signal, sys

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a command run by hand
create_dynamic = _imp.create_dynamic
signum = int(sys.argv[1])

def signal_while_initialising(spec, *rest):
    if spec.name == "orjson.orjson":
        os.kill(os.getpid(), signum)
        for _ in range(1000):
            pass  # where the interpreter runs the signal's Python handler
        import colorsys  # Python code run from the native module's initialisation
        os.write(1, b"initialised\\n")
    return create_dynamic(spec, *rest)

_imp.create_dynamic = signal_while_initialising
sys.argv = ["agentgate", "policy", "schema"]
from agentgate.cli import run

run()
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="signals cannot be blocked here")
@pytest.mark.parametrize(
    ("signum", "line", "code"),
    [(signal.SIGINT, "agentgate: interrupted\n", 130), (signal.SIGTERM, "agentgate: terminated\n", 143)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_while_a_native_module_initialises_waits_for_it_to_load(
    signum: int, line: str, code: int
) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(int(signum))],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.stdout == "initialised\n", done.stderr
    assert done.stderr == line
    assert done.returncode == code
