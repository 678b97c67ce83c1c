"""Review R63: Ctrl-C while an example writes its summary. tests/test_examples_r62_interrupt.py sent
it once it had read the summary's line ``Spent (committed``, with the rest of the summary perhaps
written already: a signal that came after the run returned got the same ``interrupted`` and 130
(the handler outlives the run), and nothing checked that the summary stopped. It did not in
research_team.py: ``asyncio.run`` had put its own handler in place, which only cancels the main
task at its next ``await``, and the summary has none: it ran to its end, then said
``interrupted``.

Here the example's stdout (unbuffered: one write per ``print`` argument and line end) is a pipe in
packet mode (``O_DIRECT``: each write is its own packet, never merged) one page deep: it holds
one packet, so the example is at most one write ahead of what the test has read, and blocks on
the next. Once the test has read the ``Spent`` line it stops reading: the example is held inside
its summary, its grants and the audit log's line still to write, when the signal comes. What it
writes after the signal shows whether the summary was cut there.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.cli.main import main as cli_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a pipe in packet mode is Linux's")


def _interrupt_in_the_summary(name: str, workdir: Path) -> tuple[str, str, str, int]:
    """What the example wrote before the signal, after it, its stderr and its exit status."""
    read, write = os.pipe2(os.O_DIRECT)
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)  # one page (the least there is): one packet
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    with open(read, "rb", buffering=0) as stdout:
        # The test's copy of the example's end is closed once it has started: the pipe ends with it.
        with open(write, "wb", buffering=0) as its_stdout:
            example = subprocess.Popen(
                [sys.executable, str(EXAMPLES / name)],
                cwd=workdir,
                stdout=its_stdout,
                stderr=subprocess.PIPE,
                env=dict(env, PYTHONUNBUFFERED="1"),
            )
        with example:
            before = b""
            while b"Spent (committed" not in before:
                packet = stdout.read(65536)  # one write of the example's
                assert packet, before.decode()  # it ended before its summary's spending
                before += packet
            example.send_signal(signal.SIGINT)  # held: blocked on its next write but one
            after = stdout.read()
            _, err = example.communicate(timeout=60)
    return before.decode(), after.decode(), err.decode(), example.returncode


@pytest.mark.parametrize("name", ["research_team.py", "support_agent.py"])
def test_ctrl_c_while_the_example_writes_its_summary_cuts_it_and_leaves_a_store_that_verifies(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: Ctrl-C while the example is held inside its summary (its ``Spent`` line
    written, its grants and the audit log's line not) ends it there: the rest of the summary is
    not written, the one line ``interrupted`` and 130 follow, and its store verifies."""
    before, after, err, status = _interrupt_in_the_summary(name, tmp_path)
    assert "Audit log:" not in before
    assert err == "interrupted\n", err[-3000:]
    assert status == 130
    # At most a write or two already under way (the signal may reach another thread first).
    assert "Audit log:" not in after, after
    store = tmp_path / ".agentgate" / "demo" / name.removesuffix(".py") / "agentgate.db"
    assert cli_main(["audit", "verify", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("intact:")
