"""A declared integer argument beyond 64 bits is refused by the policy, as a constraint's integer is.

Until review R58 ``Gate.authorize`` (and so the CLI and the gateway) allowed ``amount`` 10**29 for
a tool declaring ``amount: {type: integer}`` when no constraint bounded it, while the LangGraph
middleware refused such a call and a constraint may not name such an integer at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.mark.parametrize(
    ("amount", "allowed"),
    [(10**29, False), (2**63, False), (-(2**63), False), (2**63 - 1, True), (-(2**63) + 1, True), (7, True)],
)
def test_a_declared_integer_beyond_64_bits_is_refused(tmp_path: Path, amount: int, allowed: bool) -> None:
    """Review R58: an unconstrained declared integer of any size was allowed."""
    keys = {name: SigningKey.generate() for name in ("root", "a")}
    text = f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  a: {{kind: agent, did: "{keys["a"].did}", roles: [r]}}
tools:
  pay: {{args: {{amount: {{type: integer}}, fee: {{type: number}}}}}}
roles:
  r: {{kind: agent, capabilities: [{{resource: tool:pay}}], ttl_s: 600}}
"""
    with Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        agent = gate.issue(keys["root"], name="a", key=keys["a"], role="r")
        for name in ("amount", "fee"):
            auth = gate.authorize(agent, Call.tool("pay", {name: amount}))
            assert auth.allowed is allowed, (name, auth.reasons)
            if not allowed:
                assert auth.reasons == (
                    f"argument {name!r} is an integer of {amount.bit_length()} bits, beyond the range "
                    "-2**63 < v < 2**63",
                )
        assert gate.verify().ok
