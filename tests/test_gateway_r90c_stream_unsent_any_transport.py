"""A stream behind an approval gate that the gateway gave up while it waited in line (429
``shed``), before any backend got it, keeps its approval on a model with an https backend too, as
the same JSON call does (regression review of R90c).

The Dispatcher marks a ``NoBackend``/``Shed`` raised before any attempt ``sent=False`` over any
transport, and ``Gate.arun`` (the JSON path) settles such a call as not started; but the stream
path asked only whether the plain-http pool had sent it, which a model with an https backend
never uses: its stream was settled as started and its approval used up, the retry the 429 asked
for refused 403 ``approval_not_usable``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_r90_unsent_approval import _approval, _approved, _hold_the_only_slot, _until
from test_gateway_sdks import SIM, TOOLY, _gateway

from agentgate.sim import SimServer

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend = test_gateway_sdks.sim, test_gateway_sdks.backend

DOWN_TLS = {"name": "tls", "url": "https://127.0.0.1:9", "engine": "vllm", "models": [TOOLY]}
"""An https backend of the model that nothing answers: marked down by its first probe, so the
model is not served by the plain-http pool alone, and no call reaches it."""


def test_a_stream_shed_in_line_on_a_model_with_an_https_backend_keeps_its_approval(
    tmp_path: Path, sim: SimServer, backend: Any
) -> None:
    backends = [
        {"name": "sim", "url": sim.url, "engine": "vllm", "models": [SIM]},
        {"name": "scripted", "url": backend.url, "engine": "vllm", "models": [TOOLY], "max_concurrency": 1},
        DOWN_TLS,
    ]
    with _gateway(tmp_path, sim, backend, backends=backends, slo_ttft_s=0.3) as env:
        dispatcher = env.server.gateway.dispatcher
        _until(lambda: dispatcher.is_down("tls"), "the https backend was never marked down")
        approval = _approval(env, stream=True)
        holder = _hold_the_only_slot(env, backend)
        with pytest.raises(openai.RateLimitError) as shed:  # its SLO ran out in line
            _approved(env.client(max_retries=0), approval, stream=True)
        assert shed.value.code == "shed"
        backend.release.set()
        holder.join(10)
        backend.holding = False
        _until(lambda: env.held() == 0, "a call was never settled")
        assert len(backend.bodies) == 1  # the other call's: no backend got the shed one
        given_up = next(e for e in env.entries() if e.kind == "outcome")
        request = json.loads(approval)["request"]
        assert given_up.status == "error" and given_up.reasons[0].startswith("Shed: ")
        assert given_up.reasons[-1] == f"not started: approval request {request} is pending again"
        # The retry the 429 asked for, with the same approval: it runs, once.
        assert _approved(env.client(max_retries=0), approval, stream=True) == "xyz"
        assert len(backend.bodies) == 2
