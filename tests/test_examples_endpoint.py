"""The examples against an OpenAI-compatible endpoint given by the environment (docs/quickstart.md).

The endpoint is agentgate's simulated vLLM server: real HTTP on 127.0.0.1, the OpenAI chat
completions API, a model name of its own. It answers with text and never asks for a tool, so
these runs show the wiring (the agent's own ``ChatOpenAI`` talks to the endpoint, each model call
is decided, charged with the usage the endpoint reports and audited), not an agent's behaviour.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.sim import LLAMA_8B_H100, SimServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENDPOINT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SimServer]:
    with SimServer(LLAMA_8B_H100, model_name=ENDPOINT_MODEL, time_scale=0.01) as server:
        yield server


def _run(name: str, server: SimServer, workdir: Path) -> str:
    env = dict(
        os.environ,
        AGENTGATE_OPENAI_BASE_URL=server.url + "/v1",
        AGENTGATE_OPENAI_MODEL=ENDPOINT_MODEL,
        AGENTGATE_DEMO_DIR=str(workdir),
    )
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=300
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert "VERIFIES" in result.stdout
    return result.stdout


def test_research_team_sends_its_model_calls_to_the_endpoint(endpoint: SimServer, tmp_path: Path) -> None:
    before = endpoint.served
    out = _run("research_team.py", endpoint, tmp_path)
    assert endpoint.served > before  # the endpoint served the model, not the offline simulators
    assert f"Model calls served by {endpoint.url}/v1" in out
    # decided under the policy's name for the model, charged with the usage the endpoint reported
    assert re.search(r"supervisor\s+\d+ allowed.*\s([1-9]\d*) model calls", out), out[-2000:]
    spent = re.search(r"grant \w+ of supervisor\s+(\d+) of", out)
    assert spent is not None and int(spent.group(1)) > 0


def test_support_agent_runs_on_the_endpoint(endpoint: SimServer, tmp_path: Path) -> None:
    before = endpoint.served
    _run("support_agent.py", endpoint, tmp_path)
    assert endpoint.served > before
