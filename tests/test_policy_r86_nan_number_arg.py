"""Review R86: ``PolicyIndex.evaluate`` denies a declared ``number`` argument that is NaN or an
infinity, saying which argument and that it is not a finite number, as the Gate denies the call
(``args_not_canonical``: JSON has no NaN or infinity). Until R86 the index allowed it where no
constraint bounded the argument, so ``agentgate policy explain`` and the Gate disagreed."""

from __future__ import annotations

import math

import pytest

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

POLICY = """version: 1
principals:
  agent: {kind: agent, roles: [worker]}
tools:
  pay:
    args: {amount: {type: number, required: true}}
roles:
  worker:
    kind: agent
    capabilities: [{resource: tool:pay}]
"""


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="p.yaml"))


@pytest.mark.parametrize(("value", "written"), [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_a_number_argument_that_is_not_finite_is_denied(
    index: PolicyIndex, value: float, written: str
) -> None:
    decision = index.evaluate("agent", Call("tool:pay", "invoke", {"amount": value}))
    assert decision.outcome is Outcome.DENY and decision.rule is None
    assert decision.reasons == (
        f"argument 'amount' is {written}, not a finite number: JSON carries no NaN or infinity",
    )


@pytest.mark.parametrize("value", [1.5, -0.0, 1e308, 5])
def test_a_finite_number_argument_is_allowed(index: PolicyIndex, value: float) -> None:
    decision = index.evaluate("agent", Call("tool:pay", "invoke", {"amount": value}))
    assert decision.outcome is Outcome.ALLOW
