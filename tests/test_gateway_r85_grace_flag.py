"""``agentgate serve --shutdown-grace-s`` takes exactly the graces ``GatewayServer`` takes, a whole
number of seconds from 0 to 86400, and refuses any other with exit 2 and one line naming the flag,
before the store is opened or the port bound (review R85).

Until R85 the flag had no upper bound: 100000 passed it, the store was opened and the port bound,
and then ``GatewayServer`` refused it in a line naming its Python parameter, ``shutdown_grace_s``,
where docs/cli.md says a time limit over 86400 is one line naming the flag."""

from __future__ import annotations

import argparse

import pytest
from test_gateway import Env

from agentgate.cli.main import main
from agentgate.cli.serve import _grace
from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize("value", ["86401", "100000", "-1", "1.5", "1e3", "nan", "ten"])
def test_a_grace_the_server_refuses_is_refused_by_the_flag_in_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """The policy file does not exist: a grace that passed the flag would be refused for that."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", "p.yaml", "--inventory", "i.yaml", "--shutdown-grace-s", value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("agentgate: error: ")]
    assert len(lines) == 1 and "argument --shutdown-grace-s: " in lines[0], err
    assert "shutdown_grace_s" not in err


@pytest.mark.parametrize("seconds", [0, 1, 10, 86400, 86401, 100000, -1])
def test_the_flag_takes_a_whole_grace_exactly_when_the_server_takes_it(env: Env, seconds: int) -> None:
    """(A fraction is refused by both: the flag above, the server since review R62.)"""
    try:
        flag_takes = _grace(str(seconds)) == seconds
    except argparse.ArgumentTypeError:
        flag_takes = False
    try:
        GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=seconds)
        server_takes = True
    except InputError:
        server_takes = False
    assert flag_takes == server_takes


def test_a_grace_too_long_to_write_is_refused_naming_it(env: Env) -> None:
    """Its refusal quotes the grace by its size: Python will not write an integer of 5,000 digits,
    and the refusal was itself a bare ``ValueError``."""
    with pytest.raises(InputError, match=r"^shutdown_grace_s must be .*, not an integer of \d+ bits$"):
        GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=10**5000)
