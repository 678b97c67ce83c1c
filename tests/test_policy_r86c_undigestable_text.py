"""Review R86c: ``PolicyIndex.evaluate`` reads a model's or an undeclared resource's call
arguments by the Gate's own rule (``canonical_json``, through which ``args_digest`` writes them),
so text that is not valid Unicode (a lone surrogate, in a value or a name, at the top or nested),
an argument name that is not text and an integer of more than 4,300 digits are denied as the
Gate denies them (``args_not_canonical``). R86b read them by ``check_json`` alone, which passes
all three, and its pre-scan took any text and any integer as digestible: ``policy explain``
said allow where the Gate denied."""

from __future__ import annotations

from typing import Any

import pytest
from test_policy_r86b_undigestable_args import POLICY

from agentgate.authority import args_digest
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="p.yaml"))


def _call(resource: str, args: dict[Any, Any]) -> Call:
    return Call(resource, "generate" if resource.startswith("model:") else "lease", args)


_REFUSED = [
    ({"prompt": "\ud800"}, "value holds text that is not valid Unicode (position 11)"),
    ({"stop": ["caf\u00e9", "\udc00"]}, "value holds text that is not valid Unicode (position 17)"),
    ({"\ud800": 1}, "value holds text that is not valid Unicode (position 2)"),
    ({"opts": {"a\udfffb": True}}, "value holds text that is not valid Unicode (position 11)"),
    ({1: 2}, "$: object key 1 is not a string"),
    ({"seed": 10**5000}, "(4300 digits)"),
    ({"stop": [1, 10**5000]}, "(4300 digits)"),
]


@pytest.mark.parametrize("resource", ["model:llama", "gpu:h100"])
@pytest.mark.parametrize(("args", "said"), _REFUSED)
def test_arguments_the_gate_cannot_digest_are_denied_with_its_reason(
    index: PolicyIndex, resource: str, args: dict[Any, Any], said: str
) -> None:
    with pytest.raises(TokenFormatError) as digest:
        args_digest(args)
    assert said in str(digest.value)
    decision = index.evaluate("agent", _call(resource, args))
    assert decision.outcome is Outcome.DENY and decision.rule is None
    assert decision.reasons == (
        f"call arguments cannot be digested: {digest.value}; the Gate denies such a call (args_not_canonical)",
    )


@pytest.mark.parametrize("resource", ["model:llama", "gpu:h100"])
@pytest.mark.parametrize(
    "args",
    [
        {"prompt": "caf\u00e9 \U0001f600"},
        {"\u00e9t\u00e9": "ok", "max_tokens": 256},
        {"messages": [{"role": "user", "content": "\u4f60\u597d"}]},
        {"seed": 2**63, "n": -(2**63) - 1, "logit_bias": {"1": 10**4000}},
    ],
)
def test_arguments_the_gate_can_digest_are_allowed(
    index: PolicyIndex, resource: str, args: dict[str, Any]
) -> None:
    args_digest(args)
    assert index.evaluate("agent", _call(resource, args)).outcome is Outcome.ALLOW
