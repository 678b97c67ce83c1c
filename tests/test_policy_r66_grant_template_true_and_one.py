"""Review R66: a role's grant template dropped a rule equal to an earlier one by Python's
equality, and ``x = 1`` equals ``x = true`` there (``True == 1``), though one allows a number
and the other a boolean."""

from __future__ import annotations

from agentgate.capabilities import Constraint
from agentgate.policy import parse_policy, role_grant_template

POLICY = """version: 1
principals:
  bob: {kind: agent, roles: [r]}
tools:
  t: {args: {x: {type: integer}}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - {resource: 'tool:t', constraints: {x: {eq: true}}}
      - {resource: 'tool:t', constraints: {x: {eq: 1}}}
      - {resource: 'tool:t', constraints: {x: {eq: 1}}}
"""


def test_a_rule_on_one_is_kept_beside_a_rule_on_true() -> None:
    """Review R66: the role's grant held ``x = true`` only, so a call with ``x = 1``, which the
    role's second rule admits, was refused under a grant issued for the role. Each rule is kept
    once: the same rule twice is still one capability."""
    caps = role_grant_template(parse_policy(POLICY, source="p.yaml"), "r").capabilities
    assert [(c.constraints[0][1].eq, type(c.constraints[0][1].eq)) for c in caps] == [(True, bool), (1, int)]
    assert caps[1].constraints == (("x", Constraint(eq=1)),)
