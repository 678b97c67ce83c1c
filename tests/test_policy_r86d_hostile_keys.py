"""Review R86d: an argument key that is not text is quoted in a refusal as ``quoted`` writes it
(bounded, an integer past 128 bits by its size), so ``PolicyIndex.evaluate`` denies such a call
and the Gate's ``args_digest`` refuses it with ``TokenFormatError``. Until R86d ``check_json``
wrote the key's whole ``repr``: a key of ``10**5000`` was a bare ``ValueError`` out of
``evaluate`` (documented never to raise for a bad call), a tuple key nested 100,000 deep a
``RecursionError``, and ``(1,) * 100000`` a 300 KB deny reason; a declared tool's undeclared
argument name was written the same way."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.authority import args_digest
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

POLICY = """version: 1
principals:
  agent: {kind: agent, roles: [worker]}
models:
  llama: {cost_per_mtok: {input: 1, output: 1}}
tools:
  t: {args: {s: {type: string}}}
roles:
  worker:
    kind: agent
    capabilities: [{resource: "model:llama"}, {resource: "gpu:*"}, {resource: "tool:t"}]
"""


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="p.yaml"))


def _nested(depth: int) -> Any:
    key: Any = 1
    for _ in range(depth):
        key = (key,)
    return key


_KEYS = [
    (10**5000, "an integer of 16610 bits"),
    ((1,) * 100_000, "(1, 1, 1,"),
    (_nested(100_000), "a tuple nested too deep to write"),
]


@pytest.mark.parametrize("resource", ["model:llama", "gpu:h100"])
@pytest.mark.parametrize(("key", "said"), _KEYS, ids=["huge-int", "long-tuple", "deep-tuple"])
def test_a_key_that_is_not_text_is_denied_with_a_bounded_reason(
    index: PolicyIndex, resource: str, key: Any, said: str
) -> None:
    args = {"opts": {key: 1}}
    with pytest.raises(TokenFormatError) as digest:
        args_digest(args)
    assert said in str(digest.value)
    assert len(str(digest.value)) < 200
    decision = index.evaluate("agent", Call(resource, "generate", args))
    assert decision.outcome is Outcome.DENY
    (reason,) = decision.reasons
    assert "object key" in reason and said in reason
    assert len(reason) < 400


@pytest.mark.parametrize(
    ("name", "said"),
    [(10**5000, "an integer of 16610 bits"), ("k" * 1_000_000, "'kkk"), ((1,) * 100_000, "(1, 1,")],
    ids=["huge-int", "long-text", "long-tuple"],
)
def test_an_undeclared_argument_name_is_quoted_bounded(index: PolicyIndex, name: Any, said: str) -> None:
    decision = index.evaluate("agent", Call("tool:t", "run", {name: "x"}))
    assert decision.outcome is Outcome.DENY
    (reason,) = decision.reasons
    assert reason.startswith(f"tool:t does not declare an argument {said}")
    assert len(reason) < 200
