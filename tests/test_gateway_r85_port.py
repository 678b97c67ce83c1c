"""``GatewayServer(port=...)`` is checked when the server is made (review R85), by the check
``SimServer``'s port has had since review R63 (``agentgate._http_limits.port_number``).

Until R85 it was not: uvicorn listened on ``port`` modulo 2**16 (70000: 4464) while ``port`` and
``url`` said 70000, and ``-1`` or ``True`` failed ``start`` with a bare ``DispatchError``."""

from __future__ import annotations

from typing import Any

import pytest
from test_gateway import Env

from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize(
    "port", [70_000, 65_536, -1, True, False, 1.5, "8000", None, pytest.param(10**5000, id="5000-digits")]
)
def test_a_port_that_is_no_tcp_port_is_refused_naming_it_when_the_server_is_made(env: Env, port: Any) -> None:
    with pytest.raises(
        InputError, match=r"^port must be an integer from 0 to 65535 \(0: any free port\), not "
    ):
        GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=port)


@pytest.mark.parametrize("port", [0, 65535])
def test_port_zero_and_the_largest_port_are_taken(env: Env, port: int) -> None:
    """0 stays "any free port" (``start`` then reads the port chosen), as the tests use it."""
    assert GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=port).port == port


def test_the_port_a_started_server_reports_is_the_port_it_listens_on(env: Env) -> None:
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0).start()
    try:
        bound = server.server.servers[0].sockets[0].getsockname()[1]
        assert server.port == bound and server.url.endswith(f":{bound}/v1")
    finally:
        server.stop()
