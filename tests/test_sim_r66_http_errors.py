"""Review R66 of the simulated backend's answers to a request no endpoint serves.

A path it does not serve (``POST /v1/completions``) or a method an endpoint does not take
(``GET /v1/chat/completions``) was answered by Starlette's default, a ``text/plain`` body ("Not
Found", "Method Not Allowed"), where vLLM, which the simulator stands for, answers every such
``HTTPException`` with an OpenAI error body (``http_exception_handler`` in vLLM's server:
``{"error": {"message": ..., "type": <the status's phrase>, "param": null, "code": <status>}}``),
and the simulator's other 4xx answers are in that shape too. A client that reads the error as
JSON, as OpenAI's SDK does, got no message.
"""

from __future__ import annotations

from collections.abc import Iterator

import _http
import pytest

from agentgate.sim import SimServer


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=1e-3) as sim:
        yield sim


@pytest.mark.parametrize(
    ("method", "path", "status", "phrase"),
    [
        ("POST", "/v1/completions", 404, "Not Found"),
        ("GET", "/no/such/path", 404, "Not Found"),
        ("GET", "/v1/chat/completions", 405, "Method Not Allowed"),
        ("DELETE", "/v1/models", 405, "Method Not Allowed"),
    ],
)
def test_a_request_no_endpoint_serves_gets_an_openai_error_body(
    server: SimServer, method: str, path: str, status: int, phrase: str
) -> None:
    """Review R66: these were answered ``text/plain`` "Not Found" / "Method Not Allowed"; vLLM
    answers them with an OpenAI error body whose type is the status's phrase."""
    answer = _http.request(method, f"{server.url}{path}", timeout=30)
    assert answer.status_code == status
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json() == {"error": {"message": phrase, "type": phrase, "param": None, "code": status}}
    if status == 405:
        assert answer.headers["allow"]  # the methods it does take, as before


def test_the_server_keeps_serving_after_them(server: SimServer) -> None:
    """Review R66 (checked, right already): a chat request after those is served."""
    _http.get(f"{server.url}/nope", timeout=30)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert _http.post(f"{server.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
