"""What ``agentgate.dispatch`` (agentgate/dispatch/__init__.py) imports for the names it exports:
each on first use, from the module that defines it, so that a name that needs no HTTP client
brings none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import agentgate.dispatch as dispatch
from agentgate.dispatch import _answers

ROOT = Path(__file__).resolve().parents[1]

_LOADED = """
import json, sys
from agentgate.dispatch import ChatChunk, ChatResult, Usage
print(json.dumps(sorted(sys.modules)))
"""


def test_the_answer_types_are_imported_without_the_backend_client() -> None:
    """Review R54: ``from agentgate.dispatch import Usage`` loaded backends.py, aiohttp and httpx.

    Rule: the answer types (``ChatChunk``, ``ChatResult``, ``Usage``) come from ``_answers``,
    which imports no HTTP client, and are the very classes the backend client returns."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout))
    assert not modules & {"aiohttp", "httpx", "agentgate.dispatch.backends"}, sorted(modules)
    from agentgate.dispatch import backends

    for name in ("ChatChunk", "ChatResult", "Usage"):
        assert getattr(dispatch, name) is getattr(_answers, name) is getattr(backends, name)
