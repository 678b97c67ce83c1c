"""Lint findings added in review R60 (agentgate/policy/_lint): a role no principal holds."""

from __future__ import annotations

from agentgate.policy import lint, parse_policy

HEAD = """\
version: 1
principals:
  alice: {kind: human, roles: [clerk]}
tools:
  tickets.read: {}
  tickets.close: {}
roles:
  base:
    capabilities: [{resource: tool:tickets.read}]
  clerk:
    inherits: [base]
"""


def _never_held(text: str) -> list[tuple[int | None, str]]:
    return [(f.line, f.message) for f in lint(parse_policy(text)) if f.code == "role_never_held"]


def test_a_role_no_principal_holds_is_reported_at_its_line() -> None:
    """Review R60: a role held by no principal (its rules can never allow a call) drew no lint finding.

    ``closer`` is held by nobody: a warning at its key's line naming it; ``base``, held through
    ``clerk``, which inherits it, is not reported."""
    text = HEAD + "  closer:\n    capabilities: [{resource: tool:tickets.close}]\n"
    ((line, message),) = _never_held(text)
    assert line == 12
    assert message.startswith("role closer is held by no principal")
    assert "the 1 rule(s) it holds never allow a call" in message


def test_every_role_held_itself_or_through_inherits_draws_no_finding() -> None:
    """The same policy with ``closer`` held by alice is not reported, nor is a role that holds no
    rule (a placeholder: nothing reads as held), nor a policy whose principals hold no role at all
    (a template or a deny-all: not reported role by role)."""
    closer = "  closer:\n    capabilities: [{resource: tool:tickets.close}]\n"
    assert _never_held(HEAD.replace("roles: [clerk]", "roles: [clerk, closer]") + closer) == []
    assert _never_held(HEAD + "  placeholder: {description: nothing yet}\n") == []
    assert _never_held(HEAD.replace("roles: [clerk]", "roles: []") + closer) == []
