"""parse_policy (agentgate/policy/_load.py): a policy's references are checked when it is read, and
a mistake is refused at its line. (The loader's other rules are in tests/test_policy_load*.py.)"""

from __future__ import annotations

import pytest


def test_a_role_inheriting_an_undeclared_role_is_refused_at_its_line() -> None:
    """R47 (policy helper's l13, untested): the check that ``inherits`` names a declared role,
    removed, survived the suite: the typo would silently inherit nothing."""
    from agentgate.errors import PolicyError
    from agentgate.policy import parse_policy

    text = """version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
roles:
  base: {capabilities: [{resource: "tool:search"}], ttl_s: 600}
  chat:
    inherits: [bsae]
    capabilities: [{resource: "tool:x"}]
    ttl_s: 600
"""
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.yaml")
    assert raised.value.line == 8 and "bsae" in str(raised.value)
