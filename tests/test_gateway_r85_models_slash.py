"""``/v1/models/`` is ``/v1/models`` written with a trailing slash: a path the gateway does not
serve, 404 ``not_found`` as ``/healthz/`` is (docs/gateway.md), whatever the method, counted under
``not_found`` (review R85). Until R85 the route ``/v1/models/{model}`` took it for a model named
``''``: 404 ``model_not_found``, "the gateway serves no model ''" (and a POST was a 405)."""

from __future__ import annotations

import _http
import pytest
from test_gateway import MODEL, Env

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _root(env: Env) -> str:
    return env.base_url.removesuffix("/v1")


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_the_models_path_with_a_trailing_slash_is_a_path_not_served(env: Env, method: str) -> None:
    answer = _http.request(method, f"{_root(env)}/v1/models/")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("not_found_error", "not_found")
    assert error["message"] == f"{method} /v1/models/: Not Found"
    assert "allow" not in answer.headers
    metrics = _http.get(f"{_root(env)}/metrics").text
    assert 'agentgate_gateway_errors_total{code="not_found",status="404"} 1.0' in metrics
    assert 'code="model_not_found"' not in metrics


def test_a_model_is_still_retrieved_and_a_model_not_served_still_named(env: Env) -> None:
    assert _http.get(f"{_root(env)}/v1/models/{MODEL}").json()["id"] == MODEL
    missing = _http.get(f"{_root(env)}/v1/models/nope").json()["error"]
    assert missing["code"] == "model_not_found" and "'nope'" in missing["message"]
