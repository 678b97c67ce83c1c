"""Review R85: AGENTGATE_OPENAI_BASE_URL is parsed before anything is made, not only its prefix
checked: a URL with no host, a broken IPv6 host or a port no URL has ends the example with one
line naming the setting and status 2, and its demo directory is never made. The examples run in
this process, as tests/test_examples_r59_endpoint.py runs them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1/v1", "Invalid IPv6 URL"),
        ("http://", "no host in it"),
        ("http:///v1", "no host in it"),
        ("http://:8000/v1", "no host in it"),
        ("http://127.0.0.1:99999/v1", "Port out of range"),
        ("http://127.0.0.1:eighty/v1", "Port could not be cast"),
        ("http://127.0.0.1:0/v1", "port 0 in it"),
        ("http://local host:8000/v1", "white space or a control character in it"),
        ("ftp://127.0.0.1/v1", "neither http:// nor https://"),
    ],
)
def test_a_base_url_the_client_cannot_call_ends_with_one_line_before_anything_is_made(
    name: str, url: str, says: str, tmp_path: Path, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R85: ``http://[::1/v1`` ended the example with two chained tracebacks (InvalidURL)
    and ``http://`` as an unreachable endpoint, both with status 1 after the store, keys and
    checkpoints were made."""
    status, out = run(name, SimpleNamespace(url=url))
    assert status == 2, out[-3000:]
    assert "Traceback" not in out
    [line] = out.splitlines()
    assert line.startswith(f"AGENTGATE_OPENAI_BASE_URL={url!r} is not an http(s) URL (")
    assert line.endswith("), e.g. http://127.0.0.1:8000/v1")
    assert says in line
    assert not (tmp_path / name.removesuffix(".py")).exists()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "https://api.example/v1/", "http://[::1]:8000/v1", "http://gpu-7/v1"]
)
def test_a_base_url_the_client_can_call_is_taken(url: str, common: Any) -> None:
    """Review R85: the check refuses only what no client can call."""
    assert common._base_url_fault(url) is None
