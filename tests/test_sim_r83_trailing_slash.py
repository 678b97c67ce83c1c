"""Review R83 of the simulated backend's answer to a served path written with a trailing slash.

docs/simulation.md said any path the server does not serve is a 404, and was silent on
``/health/`` or ``POST /v1/chat/completions/``, which the server answers with a 307 redirect (an
empty body) to the path without the slash. That is what vLLM answers: its OpenAI server is a
FastAPI app built with the default ``redirect_slashes=True``, so the simulator keeps it, and the
page now says so. These tests pin it; a path with a slash that is served neither way stays a 404
with an OpenAI error body.
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
    ("method", "path"),
    [("POST", "/v1/chat/completions/"), ("GET", "/v1/models/"), ("GET", "/health/"), ("GET", "/metrics/")],
)
def test_a_served_path_with_a_trailing_slash_is_redirected_as_vllm_does(
    server: SimServer, method: str, path: str
) -> None:
    answer = _http.request(method, f"{server.url}{path}", json={} if method == "POST" else None, timeout=30)
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{server.url}{path.rstrip('/')}"
    assert answer.content == b""


def test_a_path_served_neither_way_is_a_404_with_an_openai_error_body(server: SimServer) -> None:
    answer = _http.get(f"{server.url}/v1/completions/", timeout=30)
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {"message": "Not Found", "type": "Not Found", "param": None, "code": 404}
    }


def test_following_the_redirect_serves_the_request(server: SimServer) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with _http.Client(base_url=server.url, timeout=30, follow_redirects=True) as http:
        answer = http.post("/v1/chat/completions/", json=body)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2
