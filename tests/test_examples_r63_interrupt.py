"""Review R63: Ctrl-C while an example's run is really in progress. tests/test_examples_r62_interrupt.py
sent it once the example printed its first line, before its run began: a run that ended before the
signal came was interrupted after it, and that test passed all the same. Here the example talks
to a loopback endpoint that holds its first model call unanswered: the signal is sent while that
call waits (the run cannot end before it is answered), and the run is shown not to have ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_examples_r59_endpoint import SERVED, Endpoint

from agentgate.cli.main import main as cli_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["research_team.py", "support_agent.py"])
def test_ctrl_c_while_a_model_call_waits_ends_the_run_and_leaves_a_store_that_verifies(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: Ctrl-C while the run waits for its first model call ends the example with
    ``interrupted`` and 130, before the run ended (no ending, no summary), and what it wrote to
    its store verifies."""
    with Endpoint(lambda n, request: None, late=120) as endpoint:  # no answer: every call waits
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
        env.update(
            AGENTGATE_OPENAI_BASE_URL=endpoint.url,
            AGENTGATE_OPENAI_MODEL=SERVED,
            AGENTGATE_OPENAI_MAX_RETRIES="0",
            PYTHONUNBUFFERED="1",
        )
        with subprocess.Popen(
            [sys.executable, str(EXAMPLES / name)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as example:
            while not endpoint.requests:  # the run's first model call has reached the endpoint
                assert example.poll() is None, example.communicate()
                time.sleep(0.05)
            example.send_signal(signal.SIGINT)
            out, err = example.communicate(timeout=120)
        assert len(endpoint.requests) == 1  # the call was still waiting: the run had not gone on
    assert err == "interrupted\n", err[-3000:]
    assert example.returncode == 130
    assert out.startswith("agentgate demo:")
    for after_the_run in ("Run finished", "Run stopped", "Decisions per agent", "Audit log"):
        assert after_the_run not in out, out[-3000:]
    store = tmp_path / ".agentgate" / "demo" / name.removesuffix(".py") / "agentgate.db"
    assert cli_main(["audit", "verify", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("intact:")
