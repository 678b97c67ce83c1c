"""Review R86c: ``PolicyIndex.evaluate`` denies a declared tool's ``string`` argument holding
text that is not valid Unicode (a lone surrogate), naming the argument, as the Gate denies the
call (``args_not_canonical``: no canonical JSON writes it). Until then the index allowed it
where no constraint bounded the argument, and ``policy explain`` said allow."""

from __future__ import annotations

import pytest

from agentgate.authority import args_digest
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

POLICY = """version: 1
principals:
  agent: {kind: agent, roles: [worker]}
tools:
  echo: {args: {text: {type: string}, n: {type: integer}}}
roles:
  worker:
    kind: agent
    capabilities: [{resource: "tool:echo"}]
"""


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="p.yaml"))


@pytest.mark.parametrize(("text", "at"), [("\ud800", 0), ("caf\u00e9\udfff!", 4)])
def test_a_declared_text_argument_that_is_not_unicode_is_denied(
    index: PolicyIndex, text: str, at: int
) -> None:
    with pytest.raises(TokenFormatError):
        args_digest({"text": text})
    decision = index.evaluate("agent", Call.tool("echo", {"n": 1, "text": text}))
    assert decision.outcome is Outcome.DENY and decision.rule is None
    assert decision.reasons == (
        f"argument 'text' is not valid Unicode text (a lone surrogate at position {at}): JSON carries none",
    )


@pytest.mark.parametrize("text", ["plain", "caf\u00e9 \U0001f600", "\u4f60\u597d"])
def test_a_declared_text_argument_that_is_unicode_is_allowed(index: PolicyIndex, text: str) -> None:
    args_digest({"text": text})
    assert index.evaluate("agent", Call.tool("echo", {"text": text})).outcome is Outcome.ALLOW
