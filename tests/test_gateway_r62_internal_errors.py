"""An unexpected error inside the gateway (review R62): any exception that is not one of the
gateway's own refusals is answered 500 in OpenAI's error shape, never with its text (it may carry
secrets), and logged once, with its traceback, at ERROR.

The failures are injected through public seams of a real gateway on loopback: a ``GatewayGate``
subclass whose decision or stream fails, and a Prometheus collector on the gateway's registry
whose scrape fails."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from test_gateway import MODEL, NAMES, SimServer, _body, _policy_text

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import ChatChunk
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

pytest_plugins = ("test_gateway",)  # its ``backends`` fixture

SECRET = "sk-secret-in-the-exception-text"


class _FailingGate(GatewayGate):
    """A gate whose decision (``fail_at == "decide"``) or stream after its first chunk
    (``fail_at == "stream"``) raises an error the gateway does not expect."""

    fail_at = ""

    def authorize_invocation(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_at == "decide":
            raise RuntimeError(SECRET)
        return super().authorize_invocation(*args, **kwargs)

    async def gated_stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[ChatChunk, None]:
        inner = super().gated_stream(*args, **kwargs)
        try:
            async for chunk in inner:
                yield chunk
                if self.fail_at == "stream":
                    raise RuntimeError(SECRET)
        finally:
            await inner.aclose()


class _FailingCollector:
    """A Prometheus collector whose scrape raises."""

    def collect(self) -> Any:
        raise RuntimeError(SECRET)


@pytest.fixture
def served(
    tmp_path: Path, backends: tuple[SimServer, SimServer]
) -> Iterator[tuple[Gateway, str, AgentIdentity]]:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = _FailingGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backends[0].url, "engine": "vllm", "models": [MODEL]}]}
    )
    gateway = Gateway(gate, inventory)
    server = GatewayServer(gateway, port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield gateway, server.url, agent
    finally:
        server.stop()
        gate.close()


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The ERROR records of every logger, uvicorn's own (which does not propagate) included, at
    ERROR whatever a simulator's uvicorn set it to (a ``GatewayServer`` leaves it as it is)."""
    caplog.set_level(logging.ERROR)
    uvicorn_error = logging.getLogger("uvicorn.error")
    level = uvicorn_error.level
    uvicorn_error.setLevel(logging.ERROR)
    uvicorn_error.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        uvicorn_error.removeHandler(caplog.handler)
        uvicorn_error.setLevel(level)


def _assert_internal_error(answer: httpx.Response, caplog: pytest.LogCaptureFixture) -> None:
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == "internal_error" and "internal error" in error["message"], error
    assert SECRET not in answer.text
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1 and failures[0].exc_info is not None, [r.getMessage() for r in failures]


def test_an_unexpected_error_in_a_decision_is_an_openai_500_logged_once(
    served: tuple[Gateway, str, AgentIdentity], errors: pytest.LogCaptureFixture
) -> None:
    """Review R62: a chat call whose decision raised an unexpected error was answered uvicorn's
    plain-text ``500 Internal Server Error``; it is an OpenAI-shaped 500 ``internal_error``."""
    gateway, url, agent = served
    assert isinstance(gateway.gate, _FailingGate)
    gateway.gate.fail_at = "decide"
    body = _body()
    answer = _http.post(
        f"{url}/chat/completions", json=body, headers=invocation_headers(agent.key, agent.chain, body)
    )
    _assert_internal_error(answer, errors)


def test_an_unexpected_error_in_a_starlette_route_is_an_openai_500_logged_once(
    served: tuple[Gateway, str, AgentIdentity], errors: pytest.LogCaptureFixture
) -> None:
    """Review R62: ``GET /metrics`` whose scrape raised was Starlette's plain-text 500, its
    traceback logged twice (Starlette re-raises to uvicorn); it is an OpenAI-shaped 500."""
    gateway, url, _ = served
    gateway.registry.register(_FailingCollector())  # type: ignore[arg-type]
    answer = _http.get(url.removesuffix("/v1") + "/metrics")
    _assert_internal_error(answer, errors)


def test_an_unexpected_error_mid_stream_ends_it_with_an_error_event_logged_once(
    served: tuple[Gateway, str, AgentIdentity], errors: pytest.LogCaptureFixture
) -> None:
    """Review R62: a stream whose gate raised after output went out was cut mid-answer (no last
    event) and logged by uvicorn; it ends with an OpenAI error event ``internal_error``."""
    gateway, url, agent = served
    assert isinstance(gateway.gate, _FailingGate)
    gateway.gate.fail_at = "stream"
    body = _body(stream=True)
    answer = _http.post(
        f"{url}/chat/completions", json=body, headers=invocation_headers(agent.key, agent.chain, body)
    )
    assert answer.status_code == 200
    last = [line for line in answer.text.splitlines() if line.startswith("data: ")][-1]
    assert '"internal_error"' in last, answer.text
    assert SECRET not in answer.text
    failures = [r for r in errors.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1 and failures[0].exc_info is not None, [r.getMessage() for r in failures]


class _FailingTenant(_FailingGate):
    """A gate whose tenant look-up (after an allowed decision, before the call is sent) raises."""

    def tenant_of(self, identity: Any) -> str:
        raise RuntimeError(SECRET)


def test_an_unexpected_error_between_the_decision_and_the_backend_releases_the_reservation(
    served: tuple[Gateway, str, AgentIdentity], errors: pytest.LogCaptureFixture
) -> None:
    """Review R62: an allowed call that failed before it was sent (here its tenant look-up) was
    answered 500 with its reservation left held and no outcome audited; it is released (nothing
    charged, nothing held) and its outcome audited as an error that does not carry the text."""
    gateway, url, agent = served
    gateway.gate.__class__ = _FailingTenant
    body = _body()
    answer = _http.post(
        f"{url}/chat/completions", json=body, headers=invocation_headers(agent.key, agent.chain, body)
    )
    _assert_internal_error(answer, errors)
    gate = gateway.gate
    gate.flush()
    assert list(gate.store.query("SELECT id FROM budget_reservations WHERE state = 'reserved'")) == []
    assert gate.budget_usage(agent)[agent.chain.root.id][0] == 0
    outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
    assert len(outcomes) == 1 and outcomes[0].status == "error", outcomes
    assert SECRET not in str(outcomes[0])
