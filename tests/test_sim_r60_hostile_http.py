"""Review R60 of the simulated backend's HTTP server: a body declared as anything but JSON, and a
refused ``max_completion_tokens``.

A real vLLM server (FastAPI) reads a chat body as JSON only when its ``Content-Type`` is JSON or
absent, and refuses any other with a 400; the simulator parsed and served a ``text/plain`` or
form body as if it were JSON. Its error for a ``max_completion_tokens`` out of range named
``max_tokens``, a field the body may not hold or hold valid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import _http
import httpx
import pytest

from agentgate.sim import SimServer

_CHAT = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=0.01) as sim:
        yield sim


def _post(server: SimServer, body: bytes, headers: dict[str, str]) -> httpx.Response:
    with _http.Client(timeout=5.0) as http:
        return http.post(server.url + "/v1/chat/completions", content=body, headers=headers)


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"],
)
def test_a_body_declared_as_not_json_is_a_400_with_an_openai_error_body(
    server: SimServer, content_type: str
) -> None:
    """Review R60: a chat body sent as ``text/plain`` (or a form, XML) was parsed and served (200);
    the vLLM server the simulator stands for refuses it with a 400."""
    served = server.served
    response = _post(server, json.dumps(_CHAT).encode(), {"content-type": content_type})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "application/json" in error["message"] and content_type in error["message"]
    assert server.served == served  # nothing reached the engine


@pytest.mark.parametrize(
    "content_type", [None, "application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"]
)
def test_a_body_declared_as_json_or_undeclared_is_served(server: SimServer, content_type: str | None) -> None:
    """Review R60: JSON, any JSON subtype or parameters, and no ``Content-Type`` at all are read
    as JSON, as FastAPI reads them."""
    headers = {} if content_type is None else {"content-type": content_type}
    response = _post(server, json.dumps(_CHAT).encode(), headers)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("value", [0, -1, 2**63, 10**9])
def test_a_refused_max_completion_tokens_is_named_as_sent(server: SimServer, value: int) -> None:
    """Review R60: a ``max_completion_tokens`` out of range was refused as ``max_tokens must be
    ...``, naming a field the body held valid (5 here)."""
    body = {**_CHAT, "max_tokens": 5, "max_completion_tokens": value}
    response = _post(server, json.dumps(body).encode(), {"content-type": "application/json"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message.startswith("max_completion_tokens must be an integer from 1 to "), message
    assert str(value) in message


@pytest.mark.parametrize("stream", [False, None])
def test_stream_options_without_stream_true_is_a_400(server: SimServer, stream: bool | None) -> None:
    """Review R60: {"stream": false, "stream_options": {"include_usage": true}} was served (200);
    vLLM refuses it ("Stream options can only be defined when `stream=True`.")."""
    body: dict[str, object] = {**_CHAT, "stream_options": {"include_usage": True}}
    if stream is not None:
        body["stream"] = stream
    response = _post(server, json.dumps(body).encode(), {"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == "stream_options: Stream options can only be defined when `stream=True`."


def test_empty_stream_options_without_stream_is_served(server: SimServer) -> None:
    """vLLM's check is on a non-empty ``stream_options``: an empty object passes, as there."""
    body = {**_CHAT, "stream": False, "stream_options": {}}
    response = _post(server, json.dumps(body).encode(), {"content-type": "application/json"})
    assert response.status_code == 200, response.text
