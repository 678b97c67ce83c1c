"""Every answer of the gateway is counted in its Prometheus metrics (review R62, second round).

``agentgate_gateway_requests_total{status}`` counts every chat completion answer, the 500
``internal_error`` of an unexpected error included; ``agentgate_gateway_errors_total{status,code}``
counts every error answer of any path (a stream that ends with an error event under its 200), the
HTTP protocol's own refusals too. Until then a 500 ``internal_error`` (and every error answer
outside the chat path) was in no counter: a scrape could not show an error rate that included it.

A real gateway on loopback; the failures are injected as tests/test_gateway_r62_internal_errors.py
injects them (a ``GatewayGate`` subclass, a failing collector on the gateway's registry)."""

from __future__ import annotations

from urllib.parse import urlsplit

import _http
import httpx
from prometheus_client.parser import text_string_to_metric_families
from test_gateway import _body
from test_gateway_r62_internal_errors import _FailingCollector, _FailingGate
from test_gateway_server_settings import _answer

from agentgate.dispatch.gateway import Gateway, invocation_headers
from agentgate.gate import AgentIdentity

pytest_plugins = ("test_gateway", "test_gateway_r62_internal_errors")  # ``backends``, ``served``


def _scraped(root: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The gateway's samples, by name and sorted labels."""
    text = _http.get(f"{root}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _errors(status: str, code: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("agentgate_gateway_errors_total", (("code", code), ("status", status)))


def _requests(status: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("agentgate_gateway_requests_total", (("status", status),))


def test_every_error_answer_is_counted_by_status_and_code(
    served: tuple[Gateway, str, AgentIdentity],
) -> None:
    """Review R62: a chat call answered 500 ``internal_error`` was counted nowhere (nor any error
    answer of another path, nor a protocol refusal); each is counted by status and code."""
    gateway, url, agent = served
    root = url.removesuffix("/v1")
    assert isinstance(gateway.gate, _FailingGate)
    body = _body()

    def chat(payload: dict[str, object]) -> httpx.Response:
        headers = invocation_headers(agent.key, agent.chain, payload)
        return _http.post(f"{url}/chat/completions", json=payload, headers=headers)

    gateway.gate.fail_at = "decide"
    assert chat(body).status_code == 500
    gateway.gate.fail_at = "stream"
    assert chat(_body(stream=True)).status_code == 200  # ends with an internal_error event
    gateway.gate.fail_at = ""
    assert chat(body).status_code == 200
    assert _http.post(f"{url}/chat/completions", json=body).status_code == 401
    assert _http.post(f"{url}/chat/completions", content=b"{").status_code == 400
    assert _http.get(f"{url}/models/no-such-model").status_code == 404
    assert _http.get(f"{root}/nowhere").status_code == 404
    assert _http.delete(f"{root}/healthz").status_code == 405
    port = urlsplit(url).port
    assert port is not None
    assert _answer(port, b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 505")
    exported = _scraped(root)
    assert exported[_requests("500")] == 1
    assert exported[_requests("200")] == 2  # the stream that ended with an error event too
    assert exported[_errors("500", "internal_error")] == 1
    assert exported[_errors("200", "internal_error")] == 1  # the stream's error event
    assert exported[_errors("401", "missing_invocation")] == 1
    assert exported[_errors("400", "invalid_request")] == 1
    assert exported[_errors("404", "model_not_found")] == 1
    assert exported[_errors("404", "not_found")] == 1
    assert exported[_errors("405", "method_not_allowed")] == 1
    assert exported[_errors("505", "http_version_not_supported")] == 1
    counted = {labels for name, labels in exported if name == "agentgate_gateway_errors_total"}
    assert len(counted) == 8, counted  # nothing else: a 200 answer is no error


def test_an_internal_error_outside_the_chat_path_is_counted(
    served: tuple[Gateway, str, AgentIdentity],
) -> None:
    """Review R62: ``GET /metrics`` answered 500 ``internal_error`` was counted nowhere; it is an
    error answer (not a chat completion: ``agentgate_gateway_requests_total`` is not moved)."""
    gateway, url, _ = served
    root = url.removesuffix("/v1")
    failing = _FailingCollector()
    gateway.registry.register(failing)  # type: ignore[arg-type]
    assert _http.get(f"{root}/metrics").status_code == 500
    gateway.registry.unregister(failing)  # type: ignore[arg-type]
    exported = _scraped(root)
    assert exported[_errors("500", "internal_error")] == 1
    assert not [labels for name, labels in exported if name == "agentgate_gateway_requests_total"]
