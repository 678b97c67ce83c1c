"""A policy's version quoted shortened in its error, and a scalar with the non-specific tag `!`
read as text (YAML 1.2): defects of review R56, each test failing before its fix."""

from __future__ import annotations

import pytest

from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.policy import Outcome, PolicyIndex, parse_policy


@pytest.mark.parametrize(
    ("value", "begins"),
    [
        ('"' + "x" * 10_000 + '"', "'xxx"),
        ("[" + ", ".join(["1"] * 2_000) + "]", "[1, 1, 1"),
        ("{" + ", ".join(f"k{i}: 1" for i in range(500)) + "}", "{'k0': 1, 'k1': 1"),
    ],
)
def test_an_unsupported_version_is_quoted_shortened_in_its_one_line_error(value: str, begins: str) -> None:
    """Review R56: a version written as 10 KB of text (or a list of 2,000 items) was quoted whole, a 10 KB error.

    Every other value or key an error quotes is shortened (``MAX_QUOTED``): the message says how
    the value begins and how long it is, at the version's line and column."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"version: {value}\n", source="v.yaml")
    error = caught.value
    assert (error.line, error.column) == (1, 10)
    assert error.message.startswith("unsupported or missing policy version " + begins)
    assert "characters)" in error.message and len(error.message) < 200
    assert len(str(error)) < 400 and "\n" not in str(error)


_CODES = """version: 1
principals:
  p: {kind: service, roles: [r], did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}
tools:
  t: {args: {code: {type: string, required: true}}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - {resource: tool:t, constraints: {code: {in: [! 5, ! true, ! null, "x"]}}}
"""


def test_a_scalar_with_the_non_specific_tag_is_text_as_yaml_1_2_reads_it() -> None:
    """Review R56: `! 5`, `! true`, `! null` were read as 5, True and None (PyYAML's resolution), not the texts YAML 1.2 says.

    So ``in: [! 5]`` on a string argument held the number 5, which no text equals: the rule a
    reviewer reads as allowing the code "5" refused it, and another YAML reader disagreed with
    agentgate about what the policy says."""
    policy = parse_policy(_CODES, source="codes.yaml")
    assert policy.rules["r"][0].capability.constraint_map["code"].one_of == ("5", "true", "null", "x")
    index = PolicyIndex(policy)
    for code in ("5", "true", "null"):
        assert index.evaluate("p", Call.tool("t", {"code": code})).outcome is Outcome.ALLOW
    with pytest.raises(PolicyError, match="unsupported or missing policy version '1'") as caught:
        parse_policy("version: ! 1\n", source="v.yaml")
    assert (caught.value.line, caught.value.column) == (1, 10)
