"""Review R65b: ``delegation_without_depth``, a role's ``delegation`` that lists capabilities to
hand on with ``max_depth: 0``, where no holder of the role can ever hand one on."""

from __future__ import annotations

from agentgate.capabilities import parse_capability
from agentgate.findings import FindingKind, Severity
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, lint, parse_policy

BOT = SigningKey(b"\x21" * 32).did
LEAD = SigningKey(b"\x22" * 32).did


def policy_text(depth: int, *, also: str = "", lead_depth: int = 0) -> str:
    """Role ``worker`` (held by ``bot``, with ``also`` besides) hands on ``tool:web.fetch`` with
    ``max_depth: depth``; role ``planner`` (held by ``lead``) delegates ``lead_depth`` steps."""
    return f"""version: 1
principals:
  bot: {{kind: agent, did: {BOT}, roles: [worker{also}]}}
  lead: {{kind: agent, did: {LEAD}, roles: [planner]}}
tools:
  web.fetch: {{args: {{url: {{type: string}}}}}}
  web.search: {{args: {{q: {{type: string}}}}}}
roles:
  worker:
    ttl_s: 600
    capabilities: [{{resource: tool:web.fetch}}]
    delegation:
      max_depth: {depth}
      max_ttl_s: 300
      capabilities: [{{resource: tool:web.fetch}}]
  helper:
    ttl_s: 600
    capabilities: [{{resource: tool:web.search}}]
    delegation: {{max_depth: 1, max_ttl_s: 300}}
  pager:
    ttl_s: 600
    delegation: {{max_depth: 1, max_ttl_s: 300}}
  planner:
    ttl_s: 600
    capabilities: [{{resource: tool:web.fetch}}]
    delegation: {{max_depth: {lead_depth}, max_ttl_s: 300}}
"""


def _found(text: str) -> list[str]:
    return [
        f.message for f in lint(parse_policy(text, source="p.yaml")) if f.code == "delegation_without_depth"
    ]


def test_capabilities_to_hand_on_at_depth_zero_are_a_warning() -> None:
    """Review R65b: ``max_depth: 0`` lets a grant for the role take no delegation step, so the
    capabilities its ``delegation`` lists are never handed on; lint was silent."""
    policy = parse_policy(policy_text(0), source="p.yaml")
    found = [f for f in lint(policy) if f.code == "delegation_without_depth"]
    assert [(f.kind, f.severity, f.line) for f in found] == [
        (
            FindingKind.AUTHORITY_CHAIN_OPACITY,
            Severity.WARNING,
            policy.line_of("roles", "worker", "delegation", "max_depth"),
        )
    ]
    assert "role worker lists 1 capability to hand on" in found[0].message
    assert PolicyIndex(policy).delegation_depth(BOT) == 0  # what the finding says: no step


def test_a_depth_of_one_is_no_finding() -> None:
    """Review R65b: the finding is for depth 0 only."""
    assert _found(policy_text(1)) == []


def test_a_holder_that_holds_a_role_delegating_further_is_no_finding() -> None:
    """Review R65b: a principal's grant goes as deep as the deepest role it holds, and each
    role's delegation entries bound what it hands on: bot, also holding helper (depth 1), may hand
    on worker's tool:web.fetch, so the entries are no dead letter."""
    text = policy_text(0, also=", helper")
    assert _found(text) == []
    index = PolicyIndex(parse_policy(text, source="p.yaml"))
    fetch = parse_capability("tool:web.fetch")
    assert index.delegation_depth(BOT) == 1
    assert index.delegation_fault(BOT, BOT, [fetch], 60, None, "bot") is None


def test_a_held_role_that_holds_no_rule_delegates_nothing_further() -> None:
    """Review R96: a role holding no rule (pager) decides no call, so its depth lifts no bound
    (``Policy.ruling_roles``): bot's grant takes no step, and lint says worker's entries are
    never handed on, as the decisions read it (until then lint and the decisions took pager's
    depth of 1)."""
    text = policy_text(0, also=", pager")
    assert len(_found(text)) == 1
    assert PolicyIndex(parse_policy(text, source="p.yaml")).delegation_depth(BOT) == 0


def test_a_chain_two_steps_deep_elsewhere_is_no_finding() -> None:
    """Review R65b: where a principal's roles let a chain go two steps or more, a named holder of
    the role may be delegated to in it and hand on in turn, bounded by the role's entries: no
    finding where the policy lets any chain go that deep."""
    assert _found(policy_text(0, lead_depth=2)) == []
    assert len(_found(policy_text(0, lead_depth=1))) == 1


def test_depth_zero_without_capabilities_is_no_finding() -> None:
    """Review R65b: ``max_depth: 0`` alone says plainly that nothing is handed on."""
    assert _found(policy_text(0).replace("      capabilities: [{resource: tool:web.fetch}]\n", "")) == []
