"""What importing the LangGraph integration loads (agentgate/integrations/langgraph/_models.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DISPATCH_BACKENDS = ("aiohttp", "agentgate.dispatch.backends", "agentgate.dispatch.dispatcher")


def test_importing_the_integration_loads_no_dispatch_backends() -> None:
    """Review R65: ``import agentgate.integrations.langgraph`` loaded aiohttp and the dispatch
    backends (``_models`` took its chunk and usage values from ``dispatch.backends``, which holds
    the HTTP clients), although an agent without a dispatcher never uses them."""
    code = "import json, sys\nimport agentgate.integrations.langgraph\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert sorted(modules & set(DISPATCH_BACKENDS)) == []
