"""Regression review of R85: ``Gateway(slo_ttft_s=None)`` (agentgate/dispatch/gateway).

Before R85 the gateway passed ``None`` on to the dispatcher, which reads it as its own SLO
(``Dispatcher.chat``'s documented default), and calls were served; R85's check of the setting
refused it with ``InputError`` when the gateway was made. Now ``None`` is taken again, meaning
the dispatcher's SLO, and anything else that is no positive finite number is still refused.
"""

from __future__ import annotations

import dataclasses

from test_gateway import Env, _body, _post

from agentgate.dispatch.gateway import Gateway, GatewayServer, invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def test_an_slo_of_none_is_the_dispatchers_own_and_calls_are_served(env: Env) -> None:
    gateway = Gateway(env.gate, env.server.gateway.inventory, slo_ttft_s=None)
    assert gateway.slo_ttft_s is None  # each call routed with None: the dispatcher's own SLO
    server = GatewayServer(gateway, port=0).start()
    try:
        body = _body()
        served = dataclasses.replace(env, server=server)
        answer = _post(served, body, invocation_headers(env.agent.key, env.agent.chain, body))
    finally:
        server.stop()
    assert answer.status_code == 200, answer.text
