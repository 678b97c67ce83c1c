"""Review R85b: AGENTGATE_OPENAI_BASE_URL is parsed as the openai client parses it, not only by
``urllib``: a host that client's HTTP library refuses (an IPv4 address past 255, an IPv6 literal
that is none, a name IDNA cannot encode) ends the example with one line naming the setting and
status 2, and its demo directory is never made. The examples run in this process, as
tests/test_examples_r85_base_url.py runs them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://256.1.1.1/v1", "Invalid IPv4 address"),
        ("http://[v1.fe]/v1", "Invalid IPv6 address"),
        ("http://exa\u0308mple..com/v1", "Invalid IDNA hostname"),
        ("http://\uff0e/v1", "Invalid IDNA hostname"),
        ("http://a\u0301/v1", "Invalid IDNA hostname"),
    ],
)
def test_a_base_url_the_openai_client_refuses_ends_with_one_line_before_anything_is_made(
    url: str, says: str, tmp_path: Path, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R85b: these passed the R85 check and ended the example with an ``InvalidURL``
    traceback and status 1 after the store, keys and checkpoints were made."""
    status, out = run("support_agent.py", SimpleNamespace(url=url))
    assert status == 2, out[-3000:]
    assert "Traceback" not in out
    [line] = out.splitlines()
    assert line.startswith(f"AGENTGATE_OPENAI_BASE_URL={url!r} is not an http(s) URL (")
    assert line.endswith("), e.g. http://127.0.0.1:8000/v1")
    assert f"the openai client refuses it: {says}" in line
    assert not (tmp_path / "support_agent").exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",
        "https://api.example.com/v1/",
        "http://[::1]:8000/v1",
        "http://[fe80::1%25eth0]:8000/v1",
        "http://user:secret@gpu-7:8000/v1",
        "https://api.example.com:443/v1",
        "http://\u00e1rbol.example/v1",
    ],
)
def test_a_base_url_the_openai_client_takes_is_taken(url: str, common: Any) -> None:
    """Review R85b: the client's own parse refuses only what it cannot call."""
    assert common._base_url_fault(url) is None
