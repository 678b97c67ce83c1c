"""A ``SimServer`` leaves the process's logging as it was (review R63).

uvicorn's ``Config`` configures the process-wide ``uvicorn``, ``uvicorn.error`` and
``uvicorn.access`` loggers when it is made (their handlers replaced, their levels set, access
logging's propagation turned off): ``SimServer.start`` set ``uvicorn.error`` to CRITICAL for the
whole process, so a program that embeds the simulator (a test suite, a benchmark beside its own
uvicorn server) lost its uvicorn errors. The gateway had the same defect (review R62,
tests/test_gateway_r62b_logging.py). A real simulator on loopback."""

from __future__ import annotations

import logging

import _http
from test_gateway_r62b_logging import _UVICORN, _Kept, _state

from agentgate.sim import SimServer

pytest_plugins = ("test_gateway_r62b_logging",)  # its ``app_logging`` fixture


def test_a_simulator_leaves_uvicorns_loggers_as_they_were(app_logging: _Kept) -> None:
    """Review R63: ``SimServer.start`` set ``uvicorn.error`` to CRITICAL (and replaced uvicorn's
    handlers, stopped access logging's propagation) for the whole process; each logger's level,
    handlers and propagation are as the application left them while it serves and after it
    stopped, uvicorn's own lines reach the application's handler, and the simulator writes no
    access line."""
    before = {name: _state(name) for name in _UVICORN}
    server = SimServer(model_name="m", time_scale=0.01).start()
    try:
        assert {name: _state(name) for name in _UVICORN} == before
        assert _http.get(f"{server.url}/health").status_code == 200
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert _http.post(f"{server.url}/v1/chat/completions", json=body).status_code == 200
    finally:
        server.stop()
    assert {name: _state(name) for name in _UVICORN} == before
    assert any(r.name == "uvicorn.error" and r.levelno == logging.INFO for r in app_logging.records)
    access = [r.getMessage() for r in app_logging.records if r.name == "uvicorn.access"]
    assert access == []
