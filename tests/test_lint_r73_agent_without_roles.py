"""Lint on an agent declared with no roles (``agent_without_roles``): the policy reads as if the
agent could act, while every call it makes, or a sub-agent holding its key makes, is denied
(docs/policy-reference.md, delegation: until review R73 "lint does not report it")."""

from __future__ import annotations

from agentgate.findings import FindingKind, Severity
from agentgate.policy import lint, parse_policy

POLICY = """\
version: 1
trust_anchors:
  root: {{did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {{kind: agent, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [worker]}}
  helper: {{kind: {kind}, did: did:key:z6MkkmdixGr7Dcufmp29f1wKWZGR2CEXVSxu9VvkPUs5H2M2{roles}}}
tools:
  tickets.read: {{args: {{id: {{type: string}}}}}}
roles:
  worker:
    capabilities: [{capabilities}]
    ttl_s: 600
{approvals}"""


def _found(**fields: str) -> list[tuple[str, int | None, Severity, FindingKind]]:
    values = {
        "kind": "agent",
        "roles": "",
        "capabilities": '{resource: "tool:tickets.read"}',
        "approvals": "",
    }
    policy = parse_policy(POLICY.format(**(values | fields)))
    return [(f.message, f.line, f.severity, f.kind) for f in lint(policy) if f.code == "agent_without_roles"]


def test_an_agent_without_roles_is_reported_at_its_line() -> None:
    """Review R73: an agent with no ``roles`` (and one with ``roles: []``) is a warning at its
    line, naming it and saying that its calls are denied."""
    for roles in ("", ", roles: []"):
        ((message, line, severity, kind),) = _found(roles=roles)
        assert message.startswith("agent helper holds no role: every call it makes")
        assert (line, severity, kind) == (6, Severity.WARNING, FindingKind.AUTHORITY_CHAIN_OPACITY)


def test_what_holds_a_role_or_is_not_meant_to_act_is_not_reported() -> None:
    """Review R73: no finding for an agent that holds a role, a person or service without roles
    (an approver, an operator), a policy with no rule at all (a template, a deny-all), nor an
    agent named as an approver (``agent_approves`` reports that)."""
    assert _found(roles=", roles: [worker]") == []
    assert _found(kind="human") == _found(kind="service") == []
    assert _found(capabilities="") == []
    gate = "approvals:\n  look:\n    resource: tool:tickets.read\n    approvers: [helper]\n"
    assert _found(approvals=gate) == []
