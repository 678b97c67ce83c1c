"""The public face: names import from the top, and the core never imports a framework."""

from __future__ import annotations

import subprocess
import sys

import agentgate


def test_every_public_name_resolves() -> None:
    for name in agentgate.__all__:
        assert getattr(agentgate, name) is not None, name


def test_the_core_imports_without_any_framework() -> None:
    code = (
        "import sys, agentgate, agentgate.cli.main;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain', 'langchain_core')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
