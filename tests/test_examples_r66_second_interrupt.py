"""Review R66: a second Ctrl-C while an example unwinds from the first (its run's ``finally``
closing the gate and its store). Until then it raised ``KeyboardInterrupt`` again wherever the
cleanup was: ``Gate.close`` was cut (the outcomes it commits, its store's close), and under
``asyncio.run`` (research_team.py) the person read ``interrupted`` followed by ``Task exception was
never retrieved`` and a traceback. Seen by hand with research_team.py against a loopback endpoint
that holds its model call, the second signal sent 10 ms after the first.

Here a program runs an example's run through ``_common.exit_with`` as the examples do, on a real
Gate over a SQLite file, and signals itself (``os.kill``: Python runs the handler before the next
line), so that each Ctrl-C lands exactly where the test says. The program is made to count as an
example (``_interrupt`` acts only where an example is the program) by naming one on its command
line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentgate.cli.main import main as cli_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

PROGRAM = """
import asyncio, os, signal, sys, time
sys.path.insert(0, {examples!r})
import _interrupt  # first, as each example imports it
from _common import exit_with
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

root, agent = SigningKey.generate(), SigningKey.generate()
POLICY = '''
version: 1
trust_anchors: {{root: {{did: "%s"}}}}
principals: {{agent: {{kind: agent, did: "%s", roles: [worker]}}}}
tools: {{lookup: {{args: {{id: {{type: string}}}}}}}}
roles: {{worker: {{kind: agent, capabilities: [{{resource: tool:lookup}}], ttl_s: 600}}}}
''' % (root.did, agent.did)
gate = Gate(parse_policy(POLICY, source="p.yaml"), SQLiteStore({store!r}))
identity = gate.issue(root, name="agent", key=agent, role="worker")
LOOKUP = Call.tool("lookup", {{"id": "1"}})

def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)

def cleanup(presses):
    for _ in range(presses):
        ctrl_c()  # while the run unwinds from the first
    gate.close()
    print("closed", flush=True)

def sync_run():
    try:
        assert gate.run(gate.authorize(identity, LOOKUP), lambda: "found") == "found"
        ctrl_c()
        time.sleep(60)
    finally:
        cleanup({presses})
    return 0

async def async_main():
    try:
        assert gate.run(gate.authorize(identity, LOOKUP), lambda: "found") == "found"
        asyncio.get_running_loop().call_soon(ctrl_c)  # lands in the event loop, not in this task
        await asyncio.sleep(60)
    finally:
        cleanup({presses})
    return 0

exit_with(sync_run if {mode!r} == "sync" else lambda: asyncio.run(async_main()))
"""


def _run(tmp_path: Path, mode: str, presses: int) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "program.py"
    store = tmp_path / "agentgate.db"
    program.write_text(
        textwrap.dedent(PROGRAM).format(examples=str(EXAMPLES), store=str(store), mode=mode, presses=presses)
    )
    # The example named after the program makes it count as one (``_AN_EXAMPLE_IS_THE_PROGRAM``).
    return subprocess.run(
        [sys.executable, str(program), str(EXAMPLES / "research_team.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def _verifies(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["audit", "verify", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("intact:")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_ctrl_c_while_the_run_closes_its_gate_lets_it_close(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: the second Ctrl-C was raised inside the cleanup: the gate was not closed, and
    under ``asyncio.run`` a traceback followed ``interrupted``. Now the cleanup runs to its end,
    then the one line ``interrupted`` and 130."""
    done = _run(tmp_path, mode, presses=1)
    assert done.stdout == "closed\n", done.stderr[-3000:]
    assert done.stderr == "interrupted\n"
    assert done.returncode == 130
    _verifies(tmp_path / "agentgate.db", capsys)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_third_ctrl_c_ends_the_example_at_once(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: a person who presses again while the cleanup is held is not kept waiting: the
    third Ctrl-C ends the process there, with the one line and 130; what the store holds is
    whole (each write is its own transaction). Until then, under ``asyncio.run``, a traceback
    followed the line."""
    done = _run(tmp_path, mode, presses=2)
    assert done.stdout == ""
    assert done.stderr == "interrupted\n"
    assert done.returncode == 130
    _verifies(tmp_path / "agentgate.db", capsys)
