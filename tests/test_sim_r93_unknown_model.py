"""Review R93 of the simulated backend's answer to a model it does not serve.

A chat body naming another ``model`` is a 404 of type ``"not_found_error"``; the name was echoed
whole (a 4,000,000-character name gave a 4 MB error body) and the 404 was not documented. It is
now quoted to at most 60 characters, as the project's other refusals quote what they were sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import _http
import pytest

from agentgate.sim import SimServer


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(model_name="served", time_scale=1e-6) as running:
        yield running


def _chat(server: SimServer, model: str) -> tuple[int, dict[str, Any]]:
    response = _http.post(
        server.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        timeout=5.0,
    )
    return response.status_code, response.json()


def test_another_model_is_a_404_naming_it(server: SimServer) -> None:
    status, body = _chat(server, "gpt-x")
    assert status == 404
    assert body["error"] == {
        "message": "model 'gpt-x' not served",
        "type": "not_found_error",
        "param": None,
        "code": 404,
    }


def test_a_long_model_name_is_quoted_not_echoed(server: SimServer) -> None:
    status, body = _chat(server, "x" * 100_000)
    assert status == 404
    message = body["error"]["message"]
    assert message.startswith("model 'xxx") and message.endswith("... not served")
    assert len(message) <= 60 + len("model  not served")


def test_the_served_model_is_served(server: SimServer) -> None:
    assert _chat(server, "served")[0] == 200
