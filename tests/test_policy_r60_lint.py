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


FETCH = """\
version: 1
principals:
  alice: {kind: human, roles: [r]}
tools:
  web.fetch: {args: {url: {type: string}}}
roles:
  r:
    capabilities:
      - resource: tool:web.fetch
        constraints: {url: {prefix: PREFIX}}
"""


def _empty_prefix(text: str) -> list[tuple[int | None, str]]:
    return [(f.line, f.message) for f in lint(parse_policy(text)) if f.code == "empty_prefix"]


def test_an_empty_prefix_in_a_rule_or_a_delegation_rule_is_an_error() -> None:
    """Review R60: a rule's ``prefix: ""`` (an unfilled template) read as a bound, allowed every text, and lint said nothing.

    Reported at the rule's line, as an error, for a role's rule and for a delegation rule."""
    text = FETCH.replace("PREFIX", '""')
    ((line, message),) = _empty_prefix(text)
    assert line == 9
    assert message.endswith("the prefix of url is empty: every text starts with it, so it bounds nothing")
    delegating = FETCH.replace("PREFIX", "https://a/") + (
        "    delegation:\n      capabilities:\n        - resource: tool:web.fetch\n"
        "          constraints: {url: {prefix: '', eq: 'https://a/b'}}\n"
    )
    assert [line for line, _ in _empty_prefix(delegating)] == [13]
    (finding,) = [f for f in lint(parse_policy(text)) if f.code == "empty_prefix"]
    assert finding.severity == "error"


def test_a_non_empty_prefix_or_a_gate_condition_is_not_reported() -> None:
    """A prefix of one character bounds; a gate's ``when`` with an empty prefix only makes the
    gate apply to more calls (fail closed), so it is not reported."""
    assert _empty_prefix(FETCH.replace("PREFIX", "' '")) == []
    gate = "approvals:\n  g: {resource: tool:web.fetch, approvers: [alice], when: {url: {prefix: ''}}}\n"
    assert _empty_prefix(FETCH.replace("PREFIX", "https://") + gate) == []


REFUND = """\
version: 1
principals:
  alice: {kind: human, roles: [r]}
tools:
  payments.refund:
    args: {amount: {type: integer}, currency: {type: string}}
    loggable: [currency, ammount]
roles:
  r:
    capabilities: [{resource: tool:payments.refund}]
"""


def test_a_loggable_name_the_tool_does_not_declare_is_reported() -> None:
    """Review R60: a loggable name that is no declared argument (``ammount``) drew no lint finding, and the argument meant stayed digested.

    A warning at the name's line; a declared loggable name is not reported."""
    findings = [f for f in lint(parse_policy(REFUND)) if f.code == "loggable_undeclared_argument"]
    assert [(f.line, f.severity) for f in findings] == [(7, "warning")]
    assert findings[0].message.startswith(
        "tool:payments.refund marks 'ammount' loggable, which it does not declare"
    )
    fixed = REFUND.replace("ammount", "amount")
    assert [f for f in lint(parse_policy(fixed)) if f.code == "loggable_undeclared_argument"] == []
