"""Review R71 (r71-rev-f) of the console-script entry ``agentgate.cli:run``: where it installs its
SIGTERM handler.

``run`` installed it unconditionally (``main`` only in the main thread): called from any other
thread (a program or a harness that runs the command there) it died with a Python traceback
(``ValueError: signal only works in main thread``) before the command ran. And a SIGTERM that the
process's parent set to be ignored (SIG_IGN, inherited across exec, as a shell's ``trap '' TERM``
leaves it) was made to end the command all the same, where Python leaves an inherited ignored
SIGINT ignored. Each test runs a real child interpreter; the signal is sent from an import hook
(``sitecustomize``) at the moment the named module is looked up: deterministic, no sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _cli import cli

ROOT = Path(__file__).resolve().parents[1]

_HOOK = """\
import os, signal, sys

class _SignalWhenLookedUp:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == os.environ["R71_SIGNAL_AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass  # where the interpreter runs the signal's Python handler
        return None

sys.meta_path.insert(0, _SignalWhenLookedUp())
"""


def _entry() -> tuple[str, str]:
    """The module and function pyproject.toml's ``[project.scripts]`` names for ``agentgate``."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["agentgate"]
    module, _, function = entry.partition(":")
    return module, function


def _ignoring_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.mark.parametrize("at", ["agentgate.cli.main", "argparse", "agentgate.cli._policy_parser"])
def test_a_sigterm_the_parent_ignores_stays_ignored(tmp_path: Path, at: str) -> None:
    """Review R71: started with SIGTERM ignored, the console script installed its handler first
    thing, so a SIGTERM (while it imported the command, or in ``main``, which did the same) ended
    it, exit 143. Rule: as Python leaves an ignored SIGINT ignored, an ignored SIGTERM is left
    ignored: the command runs to its end, exit 0, its output whole."""
    module, function = _entry()
    (tmp_path / "sitecustomize.py").write_text(_HOOK)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n",
            "policy",
            "schema",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "R71_SIGNAL_AT": at},
        cwd=tmp_path,
        preexec_fn=_ignoring_sigterm,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith("{"), done.stdout[:200]


def test_run_from_a_thread_that_is_not_the_main_one_runs_the_command(tmp_path: Path) -> None:
    """Review R71: ``run`` called outside the main thread raised ``ValueError`` (a traceback,
    nothing run), where ``main`` runs there without a SIGTERM handler. Rule: the same: the
    command runs and ``run`` exits with its code; the main thread's handler is left as it was."""
    module, function = _entry()
    program = (
        "import signal, sys, threading\n"
        f"from {module} import {function}\n"
        "sys.argv = ['agentgate', 'policy', 'schema']\n"
        "codes = []\n"
        "def command():\n"
        "    try:\n"
        f"        {function}()\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        "thread = threading.Thread(target=command)\n"
        "thread.start()\n"
        "thread.join()\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGTERM)\n"
        "sys.stderr.write(f'codes {codes}\\n')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert (done.returncode, done.stderr) == (0, "codes [0]\n"), done.stderr
    assert done.stdout.startswith("{"), done.stdout[:200]


def test_a_verb_that_signs_no_checkpoint_says_nothing_of_the_default_log_key(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the PostgreSQL default-log-key warning (53d5bc6e) was said by every verb that
    opened the log with its private key while the log had no checkpoint, ``audit verify`` and
    ``audit show`` among them, which sign nothing: the key they read becomes nothing. Rule: only
    a verb that may sign the log's first checkpoint (``audit checkpoint``, ``audit prove``) says it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    # A SQLite quickstart's key, at the PostgreSQL default's path, .agentgate/log.key: no checkpoint
    # of the PostgreSQL log is signed with it.
    sqlite = str(tmp_path / ".agentgate" / "agentgate.db")
    assert cli(capsys, "store", "init", "--store", sqlite)[0] == 0
    assert cli(capsys, "audit", "checkpoint", "--store", sqlite)[0] == 0
    assert (tmp_path / ".agentgate" / "log.key").exists()
    assert cli(capsys, "store", "init", "--store", postgres_url)[0] == 0
    for verb in ("verify", "show"):
        code, _out, err = cli(capsys, "audit", verb, "--store", postgres_url)
        assert (verb, code, [line for line in err.splitlines() if line.startswith("warning:")]) == (
            verb,
            0,
            [],
        )
    code, _out, err = cli(capsys, "audit", "checkpoint", "--store", postgres_url)
    assert code == 0 and "warning: the audit log's key is" in err, err
