"""``GatewayServer``'s ``shutdown_grace_s`` is checked when the server is made (review R62), as
its other limits are: ``agentgate serve`` checked it, the library did not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_gateway import Env

from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize("grace", [-1, "10", float("nan"), 1.5, True, None, 10**9])
def test_a_shutdown_grace_that_is_no_whole_number_of_seconds_is_refused_naming_it(
    env: Env, grace: Any
) -> None:
    """Review R62: ``shutdown_grace_s="10"`` made a server whose ``stop()`` raised ``TypeError``,
    and ``nan`` one whose ``stop()`` raised ``ValueError``, after the server had stopped taking
    calls; ``-1`` was taken. Each is an ``InputError`` naming the parameter, when the server is made."""
    with pytest.raises(InputError, match=r"^shutdown_grace_s must be a whole number of seconds from 0 to "):
        GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=grace)


def test_a_shutdown_grace_of_zero_is_taken(env: Env, tmp_path: Path) -> None:
    """Review R62: 0 (cut the calls in flight at once) stays a grace, as ``agentgate serve`` takes it."""
    assert (
        GatewayServer(
            Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=0
        ).shutdown_grace_s
        == 0
    )
