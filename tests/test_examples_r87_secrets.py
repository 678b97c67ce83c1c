"""Review R87: the examples print no secret that agentgate's own model router refuses or scrubs. A
base URL holding credentials (``user:password@``), which the backend inventory refuses because it
would be logged, ends the example with one line, the credentials left out, and status 2 before
anything is made; an endpoint's words that quote AGENTGATE_OPENAI_API_KEY, whole or a piece of it,
are printed with it as ``[redacted]``, as agentgate's backend client scrubs a backend's words. The
examples run in this process against a loopback endpoint, as tests/test_examples_r59_endpoint.py
runs them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import Endpoint, Reply
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture

KEY = "sk-live-0123456789abcdefSECRET"


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://svc:S3cretPassw0rd@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
        ("https://S3cretPassw0rd@api.example/v1", "https://***@api.example/v1"),
        ("http://svc:S3cret@Passw0rd@[::1]:8000/v1", "http://***@[::1]:8000/v1"),
        ("http://svc:S3cretPassw0rd@host:99999/v1\r", "http://***@host:99999/v1\\r"),  # refused first
    ],
)
def test_a_base_url_with_credentials_ends_with_one_line_before_anything_is_made(
    name: str, url: str, shown: str, tmp_path: Path, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R87: ``http://svc:S3cretPassw0rd@...`` was printed whole in the banner and in every
    stop line."""
    status, out = run(name, SimpleNamespace(url=url))
    assert status == 2, out[-3000:]
    [line] = out.splitlines()
    assert line == (
        f"AGENTGATE_OPENAI_BASE_URL='{shown}' carries credentials (user:password@), which the example "
        "would print with every line naming the endpoint: give the key as AGENTGATE_OPENAI_API_KEY "
        "(sent as a header)"
    )
    assert "S3cret" not in out
    assert not (tmp_path / name.removesuffix(".py")).exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://host/v1/@x", "http://host/v1?u=a@b"])
def test_an_at_sign_past_the_host_is_no_credentials(url: str, common: Any) -> None:
    """Review R87: only an ``@`` before the URL's path names credentials."""
    assert common._CREDENTIALS.match(url) is None


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, f"Incorrect API key provided: {KEY}"),  # OpenAI's words for a refused key
        (401, f"Incorrect API key provided: {KEY[:12]}***{KEY[-4:]}"),  # a masked key
        (500, f"upstream said: key {KEY} is over its quota"),
    ],
)
def test_the_key_an_endpoint_quotes_is_printed_redacted(
    status: int, message: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R87: an endpoint that echoed the key it refused had AGENTGATE_OPENAI_API_KEY printed
    whole under ``Run stopped:``."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        return status, json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()

    with Endpoint(answer) as endpoint:
        exit_status, out = run("support_agent.py", endpoint, API_KEY=KEY, MAX_RETRIES="0")
    assert exit_status == 1, out[-3000:]
    assert "[redacted]" in out
    assert KEY[:8] not in out
    assert "SECRET" not in out


def test_the_key_in_an_error_object_answer_is_printed_redacted(run: Callable[..., tuple[int, str]]) -> None:
    """Review R87: an answer with status 200 that is an error object quoting the key printed it whole."""
    body = json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()
    with Endpoint(lambda n, request: (200, body)) as endpoint:
        exit_status, out = run("support_agent.py", endpoint, API_KEY=KEY, MAX_RETRIES="0")
    assert exit_status == 1, out[-3000:]
    assert "its answer is an error: bad key [redacted]" in out.replace("\n  ", " ")
    assert KEY[:8] not in out
