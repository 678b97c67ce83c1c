"""A Gate without a dispatcher loads no dispatch layer (review R64): every worker process, every
CLI verb that builds a Gate and every subprocess of the test suite paid for the dispatcher, its
HTTP client aiohttp and the GPU inventory at ``from agentgate.gate import Gate``, though only
``Gate.attach_dispatcher`` uses them. httpx too, which the scheduler's default retry classifier
(``agentgate.tasks._classify``) imported only to name its exceptions (the lead's follow-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DISPATCH_LAYER = (
    "aiohttp",
    "httpx",
    "agentgate.dispatch.backends",
    "agentgate.dispatch.dispatcher",
    "agentgate.dispatch.inventory",
)


def loaded_after(code: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    program = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_gate_loads_no_dispatch_layer(tmp_path: Path) -> None:
    """Review R64: ``from agentgate.gate import Gate`` imports neither the dispatcher nor aiohttp
    nor the inventory; they load when a dispatcher is made."""
    modules = loaded_after("from agentgate.gate import Gate", tmp_path)
    assert "agentgate.gate._gate" in modules
    assert sorted(modules & set(DISPATCH_LAYER)) == []


def test_a_gate_opened_and_closed_without_a_dispatcher_loads_no_dispatch_layer(tmp_path: Path) -> None:
    """Review R64: a Gate made over a policy and a SQLite store, and closed, never attached a
    dispatcher, so it loaded none of the dispatch layer."""
    (tmp_path / "policy.yaml").write_text("version: 1\ntools:\n  search.web: {}\n")
    code = "from agentgate.gate import Gate\ngate = Gate.open('policy.yaml', 's.db')\ngate.close()"
    assert sorted(loaded_after(code, tmp_path) & set(DISPATCH_LAYER)) == []


def test_the_dispatch_layer_loads_with_a_dispatcher(tmp_path: Path) -> None:
    """Review R64: the checks above are not vacuous: the same interpreter, once it makes use of
    the dispatcher, holds every module of the dispatch layer they look for."""
    modules = loaded_after(
        "from agentgate.gate import Gate\nfrom agentgate.dispatch import Dispatcher", tmp_path
    )
    assert set(DISPATCH_LAYER) <= modules
