"""Review R63: an example's entry point called twice in one process, as a notebook user (or a test
importing the example) calls it: offline and against an OpenAI-compatible endpoint (agentgate's
simulator, real HTTP on 127.0.0.1), each run must end as the first did, and leave no connection
of its own open behind it (the tests turn an unclosed one's ``ResourceWarning`` into an error)."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from agentgate.sim import SimServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVED = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(model_name=SERVED, time_scale=0.01) as server:
        yield server


def _imported(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``import NAME`` from examples/, as a notebook next to it does: a module of its own per test."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the example puts examples/ on it
    spec = importlib.util.spec_from_file_location(f"r63_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _environment(monkeypatch: pytest.MonkeyPatch, workdir: Path, base_url: str | None) -> None:
    for setting in ("BASE_URL", "MODEL", "TIMEOUT", "MAX_RETRIES", "API_KEY"):
        monkeypatch.delenv(f"AGENTGATE_OPENAI_{setting}", raising=False)
    if base_url is not None:
        monkeypatch.setenv("AGENTGATE_OPENAI_BASE_URL", base_url)
        monkeypatch.setenv("AGENTGATE_OPENAI_MODEL", SERVED)
        monkeypatch.setenv("AGENTGATE_OPENAI_MAX_RETRIES", "0")
    monkeypatch.delenv("AGENTGATE_DEMO_DIR", raising=False)
    monkeypatch.chdir(workdir)


def _open_connections(port: int) -> int:
    """How many TCP connections to 127.0.0.1:``port`` are open at this end (established, or closed
    by the server only): from /proc/net/tcp, where the remote address is the fourth column's pair."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(
        1 for line in lines if line.split()[2] == f"0100007F:{port:04X}" and line.split()[3] in ("01", "08")
    )


def _twice(run: Callable[[], int], capsys: pytest.CaptureFixture[str], port: int) -> list[str]:
    """What each of two runs printed (ids and log indices as ``<id>``), each checked to have ended
    with 0 and a verifying log, leaving no connection to the endpoint at ``port`` open."""
    printed = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for _ in range(2):
            status = run()
            out = capsys.readouterr()
            assert status == 0, (out.out + out.err)[-3000:]
            assert "Traceback" not in out.err
            assert "VERIFIES" in out.out, out.out[-3000:]
            assert _open_connections(port) == 0
            # Keys and grants are fresh each run, and parallel calls are logged in any order.
            printed.append(re.sub(r"[0-9a-f]{10,}|#\d+", "<id>", out.out))
        gc.collect()
    return printed


@pytest.mark.parametrize("endpoint", [False, True], ids=["offline", "endpoint"])
def test_research_team_main_runs_twice_in_one_process(
    endpoint: bool,
    sim: SimServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R63: research_team.main() run a second time in the same process stopped with
    "Event loop is closed": langchain-openai kept one async HTTP client per base URL for the
    process, bound to the event loop of the first ``asyncio.run``. Each run now makes and closes
    its own."""
    _environment(monkeypatch, tmp_path, sim.url + "/v1" if endpoint else None)
    research_team = _imported("research_team", monkeypatch)
    before = sim.served
    first, second = _twice(lambda: asyncio.run(research_team.main()), capsys, sim.port)
    assert "Run stopped" not in second, second[-3000:]
    assert first.count("\n") == second.count("\n")  # the backends' share of calls may differ
    assert (sim.served > before) is endpoint


@pytest.mark.parametrize("endpoint", [False, True], ids=["offline", "endpoint"])
def test_support_agent_main_runs_twice_in_one_process(
    endpoint: bool,
    sim: SimServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R63: support_agent.main() run twice in one process ends the second time as the
    first, and each run closes the HTTP client it talked to the endpoint through."""
    _environment(monkeypatch, tmp_path, sim.url + "/v1" if endpoint else None)
    support_agent = _imported("support_agent", monkeypatch)
    before = sim.served
    first, second = _twice(support_agent.main, capsys, sim.port)
    assert "Run stopped" not in second, second[-3000:]
    assert first == second
    assert (sim.served > before) is endpoint
