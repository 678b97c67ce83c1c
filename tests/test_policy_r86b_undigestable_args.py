"""Review R86b: ``PolicyIndex.evaluate`` denies a model's or an undeclared resource's call
(``gpu:h100``) whose arguments the Gate cannot digest: a NaN or an infinity anywhere in them,
nested in a list or an object too, as the Gate denies it (``args_not_canonical``). R86 denied
such a number only as a declared tool argument; a model's arguments are not declared and a
GPU's need no declaration, so ``policy explain`` said allow where the Gate denied."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

POLICY = """version: 1
principals:
  agent: {kind: agent, roles: [worker]}
models:
  llama: {cost_per_mtok: {input: 1, output: 1}}
roles:
  worker:
    kind: agent
    capabilities: [{resource: "model:llama"}, {resource: "gpu:*"}]
"""


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="p.yaml"))


_REFUSED = [
    ({"temperature": math.nan}, "$.temperature: nan cannot be encoded as JSON"),
    ({"hours": math.inf}, "$.hours: inf cannot be encoded as JSON"),
    ({"stop": [1, -math.inf]}, "$.stop[1]: -inf cannot be encoded as JSON"),
    ({"opts": {"top_p": [math.nan]}}, "$.opts.top_p[0]: nan cannot be encoded as JSON"),
    ({"opts": {"a\nb": math.nan}}, "$.opts.a\\nb: nan cannot be encoded as JSON"),
    # The rest of what the Gate cannot digest, by the same rule (``check_json``).
    ({"opts": {1: "a"}}, "$.opts: object key 1 is not a string"),
    ({"tags": {"a"}}, "$.tags: a set cannot be encoded as JSON"),
]


@pytest.mark.parametrize("resource", ["model:llama", "gpu:h100"])
@pytest.mark.parametrize(("args", "said"), _REFUSED)
def test_arguments_holding_nan_or_infinity_anywhere_are_denied(
    index: PolicyIndex, resource: str, args: dict[str, Any], said: str
) -> None:
    action = "generate" if resource.startswith("model:") else "lease"
    decision = index.evaluate("agent", Call(resource, action, args))
    assert decision.outcome is Outcome.DENY and decision.rule is None
    assert decision.reasons == (
        f"call arguments cannot be digested: {said}; the Gate denies such a call (args_not_canonical)",
    )
    assert decision.reasons[0].isprintable()


@pytest.mark.parametrize("resource", ["model:llama", "gpu:h100"])
@pytest.mark.parametrize(
    "args",
    [
        {},
        {"temperature": 0.7, "max_tokens": 100, "stop": None, "stream": True},
        {"temperature": -0.0, "seed": 2**70},
        {"messages": [{"role": "user", "content": "hi"}], "weights": [0.5, 1e308]},
    ],
)
def test_arguments_the_gate_can_digest_are_allowed(
    index: PolicyIndex, resource: str, args: dict[str, Any]
) -> None:
    action = "generate" if resource.startswith("model:") else "lease"
    decision = index.evaluate("agent", Call(resource, action, args))
    assert decision.outcome is Outcome.ALLOW


def test_allowed_through_names_no_rule_for_such_a_call(index: PolicyIndex) -> None:
    assert index.allowed_through("agent", Call("model:llama", "generate", {"temperature": math.nan})) == ()


GATED = """version: 1
principals:
  agent: {kind: agent, roles: [worker]}
  lead: {kind: human, roles: [], did: "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"}
models:
  llama: {cost_per_mtok: {input: 1, output: 1}}
roles:
  worker:
    kind: agent
    capabilities: [{resource: "model:llama"}]
approvals:
  long:
    resource: model:llama
    when: {max_tokens: {gt: 1000}}
    approvers: [lead]
"""


def test_such_a_call_is_denied_before_an_approval_gate_is_read() -> None:
    """Until R86b an infinite ``max_tokens`` made the gate ``max_tokens > 1000`` apply (a value it
    cannot compare): approval was asked for a call the Gate then denied."""
    gated = PolicyIndex(parse_policy(GATED, source="p.yaml"))
    asked = gated.evaluate("agent", Call("model:llama", "generate", {"max_tokens": 1001}))
    assert asked.outcome is Outcome.APPROVAL_REQUIRED
    decision = gated.evaluate("agent", Call("model:llama", "generate", {"max_tokens": math.inf}))
    assert decision.outcome is Outcome.DENY and decision.approval is None
