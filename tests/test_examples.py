"""The offline examples (what `make demo` runs) work end to end from any directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["research_team.py", "support_agent.py"])
def test_example_runs_offline_and_its_audit_log_verifies(name: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert "VERIFIES" in result.stdout
    assert "denied" in result.stdout.lower() or "refused" in result.stdout.lower()
    if name == "research_team.py":
        # The model calls went through the dispatcher to the two simulated backends, each named.
        served = re.search(
            r"served by the simulated GPU backends: (\d+) \(sim-0 (\d+), sim-1 (\d+)\)", result.stdout
        )
        assert served, result.stdout
        total, first, second = map(int, served.groups())
        assert total == first + second > 0
