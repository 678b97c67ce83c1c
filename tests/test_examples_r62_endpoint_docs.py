"""docs/quickstart.md's "Running the examples against a real model", followed literally (review R62)
with agentgate's simulated vLLM server as the endpoint (real HTTP on 127.0.0.1; docs/simulation.md
starts it as ``SimServer``: there is no CLI command for it): its commands run as written, the
variables it names are exactly those the examples read, and an endpoint that cannot be reached or
answers garbage stops the run with one line naming that endpoint, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _examples import EXAMPLES, run_example

from agentgate.sim import SimServer

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "docs" / "quickstart.md"


def _section() -> str:
    text = QUICKSTART.read_text(encoding="utf-8")
    return text.partition("## Running the examples against a real model")[2].partition("\n## ")[0]


def _commands() -> list[str]:
    """The section's first bash block, a command a line, comments cut."""
    block = re.search(r"```bash\n(.*?)```", _section(), re.S)
    assert block is not None
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SimServer]:
    with SimServer(model_name="sim/served-model", time_scale=0.01) as server:
        yield server


def test_the_variables_the_docs_name_are_those_the_examples_read() -> None:
    """Review R62: the variables docs/quickstart.md exports, and every AGENTGATE_OPENAI_* any page
    names, are exactly those examples/ reads from the environment."""
    code = "\n".join(path.read_text(encoding="utf-8") for path in EXAMPLES.glob("*.py"))
    read = set(re.findall(r"""(?:environ\.get|_setting)\(\s*["'](AGENTGATE_OPENAI_\w+)""", code))
    exported = {c.split()[1].split("=")[0] for c in _commands() if c.startswith("export ")}
    named = {
        name
        for page in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
        for name in re.findall(r"AGENTGATE_OPENAI_[A-Z_]+[A-Z]", page.read_text(encoding="utf-8"))
    }
    assert exported == read
    assert named == read


def test_the_docs_commands_run_the_example_against_the_simulator(endpoint: SimServer, tmp_path: Path) -> None:
    """Review R62: each command of the docs' block, as written: the client is installed, each
    ``export`` is made (the base URL the simulator's, the model the one it lists at GET /v1/models,
    as the docs say, no key: it wants none), and the example runs from another directory."""
    with urllib.request.urlopen(endpoint.url + "/v1/models", timeout=10) as response:
        listed = [each["id"] for each in json.load(response)["data"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    ran = []
    for command in _commands():
        words = shlex.split(command)
        if words[:2] == ["pip", "install"]:
            assert all(importlib.util.find_spec(p.replace("-", "_")) for p in words[2:]), command
        elif words[0] == "export":
            name, _, value = words[1].partition("=")
            if name == "AGENTGATE_OPENAI_API_KEY":
                continue  # "only if the endpoint wants one"
            value = {
                "AGENTGATE_OPENAI_BASE_URL": endpoint.url + "/v1",
                "AGENTGATE_OPENAI_MODEL": listed[0],
            }.get(name, value)
            env[name] = value
        else:
            assert words[0] == "python", command
            script = words[1].replace("/path/to/checkout", str(ROOT))
            ran.append(
                subprocess.run(
                    [sys.executable, script],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            )
    assert len(ran) == 1
    result = ran[0]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith(f"Model calls served by {endpoint.url}/v1 (model {listed[0]!r}, timeout 60 s")
    assert any(line.startswith("Run finished:") for line in lines)
    assert "VERIFIES" in result.stdout
    assert endpoint.served > 0


def _run(
    base_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """support_agent.py against ``base_url``, tried once (in this process: the imports are made once)."""
    monkeypatch.setenv("AGENTGATE_OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("AGENTGATE_OPENAI_MODEL", "sim/served-model")
    monkeypatch.setenv("AGENTGATE_OPENAI_MAX_RETRIES", "0")
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", str(workdir))
    status, out, err = run_example(EXAMPLES / "support_agent.py", capsys)
    return status, out + err


def _one_stop_naming(out: str, base_url: str) -> None:
    assert "Traceback" not in out
    unwrapped = re.sub(r"\n {2,}", " ", out)  # the lines the examples wrap at 100 columns, joined
    stopped = [line for line in unwrapped.splitlines() if line.startswith("Run stopped: ")]
    assert len(stopped) == 1, out
    assert f"AGENTGATE_OPENAI_BASE_URL={base_url}" in stopped[0], stopped[0]


def test_an_endpoint_nobody_listens_at_stops_the_run_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: a wrong URL (a port nobody listens on) ends in one line naming it, status 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
    status, out = _run(base_url, tmp_path, monkeypatch, capsys)
    assert status == 1
    _one_stop_naming(out, base_url)


def test_an_endpoint_that_answers_garbage_stops_the_run_naming_it(
    endpoint: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: the simulator answering garbage (its ``fault = "garbage"``) stopped the run with
    "the endpoint's answer is not an OpenAI chat completion", naming no endpoint."""
    endpoint.fault = "garbage"
    try:
        status, out = _run(endpoint.url + "/v1", tmp_path, monkeypatch, capsys)
    finally:
        endpoint.fault = "none"
    assert status == 1
    _one_stop_naming(out, endpoint.url + "/v1")
