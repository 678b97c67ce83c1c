"""Review R96: ``wildcard_capability_for_agent`` looked only at the own rules of agent roles, so a
human (or service) role delegating ``tool:*`` to sub-agents, each of which then got every tool,
including tools declared later, lint reported nothing. What any role lists under
``delegation.capabilities`` goes to sub-agents, so it is now checked whatever the role's kind.
"""

from __future__ import annotations

import pytest

from agentgate.keys import SigningKey
from agentgate.policy import lint, parse_policy

KEYS = {name: SigningKey.generate() for name in ("root", "lead")}


def _policy(kind: str, held: str, delegated: str) -> str:
    return f"""version: 1
trust_anchors:
  root: {{did: "{KEYS["root"].did}"}}
principals:
  lead: {{kind: {kind}, did: "{KEYS["lead"].did}", roles: [lead]}}
tools:
  web.fetch: {{args: {{url: {{type: string}}}}}}
  web.search: {{args: {{q: {{type: string}}}}}}
roles:
  lead:
    kind: {kind}
    capabilities: [{{resource: "{held}"}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      budget: {{limit: 10, unit: calls}}
      capabilities:
        - resource: "{delegated}"
"""


def _wild(text: str) -> list[tuple[str, str, int | None]]:
    return [
        (f.message, f.severity.value, f.line)
        for f in lint(parse_policy(text, source="p.yaml"))
        if f.code == "wildcard_capability_for_agent"
    ]


@pytest.mark.parametrize("kind", ["human", "service"])
def test_a_role_of_any_kind_delegating_every_tool_is_an_error(kind: str) -> None:
    text = _policy(kind, "tool:*", "tool:*")
    assert _wild(text) == [
        (
            "role lead delegates to sub-agents every tool: tool:*",
            "error",
            text.splitlines().index('        - resource: "tool:*"') + 1,
        )
    ]


def test_delegating_a_prefix_wildcard_is_a_warning() -> None:
    assert [(m, s) for m, s, _ in _wild(_policy("human", "tool:web.*", "tool:web.*"))] == [
        ("role lead delegates to sub-agents the wildcard tool:web.*", "warning")
    ]


def test_an_agent_role_is_reported_for_what_it_holds_and_what_it_delegates() -> None:
    assert [(m, s) for m, s, _ in _wild(_policy("agent", "tool:*", "tool:*"))] == [
        ("agent role lead holds every tool: tool:*", "error"),
        ("role lead delegates to sub-agents every tool: tool:*", "error"),
    ]


def test_delegating_named_tools_is_not_reported() -> None:
    assert _wild(_policy("human", "tool:*", "tool:web.fetch")) == []
