"""``Gateway(slo_ttft_s=...)`` is checked when the gateway is made (review R85), as the
dispatcher's own ``slo_ttft_s`` is: until R85 it was not, and NaN, 0, -1, infinity, ``"2"`` or
``True`` made a gateway whose every chat call was decided, reserved and audited as allowed, then
refused by the dispatcher (503 ``not_served``). ``None`` is not refused: it is the dispatcher's own
SLO, as before R85 (R85's check refused it at first; its regression review found it)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from test_gateway import Env, _body, _post

from agentgate.dispatch.gateway import Gateway, GatewayServer, invocation_headers
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize("slo", [math.nan, -1.0, 0, 0.0, math.inf, "2", True])
def test_an_slo_that_is_not_a_positive_finite_number_of_seconds_is_refused_naming_it(
    env: Env, slo: Any
) -> None:
    """Review R85: each made a gateway that answered every allowed call 503 after auditing it."""
    with pytest.raises(InputError, match=r"^slo_ttft_s must be positive and finite, got "):
        Gateway(env.gate, env.server.gateway.inventory, slo_ttft_s=slo)


@pytest.mark.parametrize("slo", [30, None], ids=["whole-seconds", "the-dispatchers-own"])
def test_an_slo_the_dispatcher_takes_is_taken_and_its_calls_are_served(env: Env, slo: int | None) -> None:
    """The check refuses no SLO the dispatcher takes: a whole number of seconds is one, and None
    (each call routed with None: the dispatcher's own SLO)."""
    gateway = Gateway(env.gate, env.server.gateway.inventory, slo_ttft_s=slo)
    assert gateway.slo_ttft_s == slo
    server = GatewayServer(gateway, port=0).start()
    try:
        body = _body()
        served = dataclasses.replace(env, server=server)
        answer = _post(served, body, invocation_headers(env.agent.key, env.agent.chain, body))
    finally:
        server.stop()
    assert answer.status_code == 200, answer.text
