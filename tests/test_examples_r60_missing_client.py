"""An example pointed at an endpoint without ``langchain-openai`` installed (review R60): it ended
with status 1, the status of a failed model call, after it had emptied and made its demo
directory; a setting it cannot use ends it with one line and status 2 before anything is made,
as a bad timeout does (tests/test_examples_r59_endpoint.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_examples_r58_endpoint import _run


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
def test_a_missing_client_ends_with_one_line_and_status_2_before_the_demo_directory_is_made(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R60: a missing langchain-openai was status 1, after the demo directory was made."""
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # as where it is not installed
    status, out = _run(name, "http://127.0.0.1:9/v1", tmp_path, monkeypatch, capsys)
    assert status == 2, out[-3000:]
    assert out.splitlines()[-1] == (
        "AGENTGATE_OPENAI_BASE_URL is set: install the client with `pip install langchain-openai`"
    )
    assert list(tmp_path.iterdir()) == []
