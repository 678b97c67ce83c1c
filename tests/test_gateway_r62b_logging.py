"""A ``GatewayServer`` leaves the process's logging as it was (review R62, second round).

uvicorn's ``Config`` configures the process-wide ``uvicorn``, ``uvicorn.error`` and
``uvicorn.access`` loggers when it is made (their handlers replaced, their levels set, access
logging's propagation turned off): an application that embeds the gateway, or runs its own
uvicorn server in the same process, had its logging changed by ``GatewayServer(...)``. The
gateway's own messages (its logger, ``agentgate.dispatch.gateway._app``) are still logged. A real
gateway on loopback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import _http
import pytest
from test_gateway import MODEL, NAMES, SimServer, _body, _policy_text
from test_gateway_r62_internal_errors import _FailingGate

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayServer, invocation_headers
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

pytest_plugins = ("test_gateway",)  # its ``backends`` fixture

_UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


class _Kept(logging.Handler):
    """An application's own handler: the records it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def app_logging() -> Iterator[_Kept]:
    """uvicorn's loggers as an application set them (DEBUG, a handler of its own, access
    logging propagated), restored afterwards."""
    before = {name: _state(name) for name in _UVICORN}
    kept = _Kept()
    for name in _UVICORN:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.handlers = [kept]
        logger.propagate = True
    try:
        yield kept
    finally:
        for name, (level, handlers, propagate) in before.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers = list(handlers)
            logger.propagate = propagate


def _state(name: str) -> tuple[int, tuple[logging.Handler, ...], bool]:
    logger = logging.getLogger(name)
    return logger.level, tuple(logger.handlers), logger.propagate


def test_a_gateway_server_leaves_uvicorns_loggers_as_they_were(
    tmp_path: Path,
    backends: tuple[SimServer, SimServer],
    app_logging: _Kept,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review R62: ``GatewayServer`` set ``uvicorn.error`` to WARNING (and replaced uvicorn's
    handlers, stopped access logging's propagation) for the whole process; each logger's level,
    handlers and propagation are as the application left them, before, during and after it
    served, and the gateway's own messages are still logged."""
    before = {name: _state(name) for name in _UVICORN}
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = _FailingGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backends[0].url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0)
    assert {name: _state(name) for name in _UVICORN} == before
    server.start()
    try:
        assert {name: _state(name) for name in _UVICORN} == before
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        gate.fail_at = "decide"
        body = _body()
        headers = invocation_headers(agent.key, agent.chain, body)
        with caplog.at_level(logging.ERROR, logger="agentgate.dispatch.gateway._app"):
            assert _http.post(f"{server.url}/chat/completions", json=body, headers=headers).status_code == 500
    finally:
        server.stop()
        gate.close()
    assert {name: _state(name) for name in _UVICORN} == before
    ours = [r for r in caplog.records if r.name == "agentgate.dispatch.gateway._app"]
    assert [r.levelno for r in ours] == [logging.ERROR], [r.getMessage() for r in ours]
    # uvicorn's own lines (its start and stop) went to the application's handler, at its level;
    # no access line for the gateway's call (the simulated backend's own probes may have some):
    # the gateway writes none, whatever the application's logging.
    assert any(r.name == "uvicorn.error" and r.levelno == logging.INFO for r in app_logging.records)
    access = [r.getMessage() for r in app_logging.records if r.name == "uvicorn.access"]
    assert [line for line in access if "/chat/completions" in line] == [], access
