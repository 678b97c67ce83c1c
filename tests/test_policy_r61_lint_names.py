"""Lint findings added in review R61 (agentgate/policy/_lint): names a reviewer cannot tell
apart (``names_differ_only_in_case``), a role declared for one kind of principal held by
another (``role_kind_mismatch``), and argument names holding invisible or non-ASCII
characters (``unclear_argument_name``)."""

from __future__ import annotations

from agentgate.findings import Severity
from agentgate.policy import lint, parse_policy

TENANTS = """\
version: 1
tenants:
  Acme: {}
  acme: {}
principals:
  alice: {kind: human, tenant: Acme, roles: [clerk]}
  bob: {kind: human, tenant: acme, roles: [clerk]}
tools:
  tickets.read: {}
roles:
  clerk:
    capabilities: [{resource: tool:tickets.read}]
quotas:
  acme-calls: {tenant: acme, window_s: 60, limit: 10}
"""


def _found(text: str, code: str) -> list[tuple[int | None, Severity, str]]:
    return [(f.line, f.severity, f.message) for f in lint(parse_policy(text)) if f.code == code]


def test_tenants_differing_only_in_case_are_an_error_at_the_second() -> None:
    """Review R61: tenants ``Acme`` and ``acme`` loaded as two and lint said nothing.

    A quota on ``acme`` then counts bob's calls only, where a reviewer reads it as counting the
    tenant alice is in too. An error at the later name's line, naming both."""
    ((line, severity, message),) = _found(TENANTS, "names_differ_only_in_case")
    assert line == 4
    assert severity is Severity.ERROR
    assert message.startswith("tenants acme and Acme differ only in case")


def test_principals_roles_and_models_differing_only_in_case_are_reported_section_by_section() -> None:
    """Review R61: roles, approval gates and models that differ only in case each draw the
    finding; a principal and a role of the same name (sections apart) do not. (Principals that
    differ only in case are refused at load since review R67: tests/test_policy_r67_principal_names.py.)"""
    text = """\
version: 1
principals:
  alice: {kind: human, roles: [clerk]}
  Alicia: {kind: agent, roles: [Clerk]}
  clerk: {kind: human, roles: [clerk]}
tools:
  tickets.read: {}
models:
  llama-3: {cost_per_mtok: {input: 1, output: 1}}
  Llama-3: {cost_per_mtok: {input: 1, output: 1}}
roles:
  clerk:
    capabilities: [{resource: tool:tickets.read}]
  Clerk:
    capabilities: [{resource: tool:tickets.read}]
"""
    found = _found(text, "names_differ_only_in_case")
    assert [(line, message.split(" differ")[0]) for line, _, message in found] == [
        (10, "models Llama-3 and llama-3"),
        (14, "roles Clerk and clerk"),
    ]


def test_distinct_names_draw_no_case_finding() -> None:
    """The policy with ``Acme`` renamed ``globex`` draws no finding."""
    text = TENANTS.replace("Acme", "globex")
    assert _found(text, "names_differ_only_in_case") == []


KINDS = """\
version: 1
principals:
  alice: {kind: human, roles: [approver]}
  bot: {kind: agent, roles: [approver]}
tools:
  payments.refund: {}
roles:
  approver:
    kind: human
    capabilities: [{resource: tool:payments.refund}]
"""


def test_a_human_role_held_by_an_agent_is_an_error_at_the_agent() -> None:
    """Review R61: a ``kind: human`` role (the approvers') held by an agent principal drew no finding.

    The agent holds what was written for people; an error at the agent's line naming both."""
    ((line, severity, message),) = _found(KINDS, "role_kind_mismatch")
    assert line == 4
    assert severity is Severity.ERROR
    assert message == "agent bot holds role approver, declared kind: human"


def test_other_kind_mismatches_are_warnings_and_matching_kinds_draw_nothing() -> None:
    """A ``kind: agent`` role held by a human is a warning (nothing is handed to an agent); a
    role held only by principals of its kind, or declaring no kind, draws no finding."""
    to_human = KINDS.replace("kind: human\n    cap", "kind: agent\n    cap").replace(
        "bot: {kind: agent, roles: [approver]}", "bot: {kind: agent, roles: []}"
    )
    ((line, severity, message),) = _found(to_human, "role_kind_mismatch")
    assert (line, severity) == (3, Severity.WARNING)
    assert message == "human alice holds role approver, declared kind: agent"
    only_humans = KINDS.replace("bot: {kind: agent, roles: [approver]}", "bot: {kind: agent, roles: []}")
    assert _found(only_humans, "role_kind_mismatch") == []
    assert _found(KINDS.replace("    kind: human\n", ""), "role_kind_mismatch") == []


ARGS = """\
version: 1
principals:
  alice: {kind: human, roles: [clerk]}
tools:
  payments.refund:
    args:
      NAME: {type: integer}
    loggable: [LOGGED]
roles:
  clerk:
    capabilities: [{resource: tool:payments.refund}]
approvals:
  big:
    resource: tool:payments.refund
    when: {WHEN: {gt: 100}}
    approvers: [alice]
"""


def _args(name: str = "amount", logged: str = "amount", when: str = "amount") -> str:
    return ARGS.replace("NAME", f'"{name}"').replace("LOGGED", f'"{logged}"').replace("WHEN", f'"{when}"')


def test_an_invisible_character_in_a_declared_argument_name_is_an_error() -> None:
    """Review R61: a tool's ``args`` name holding a zero-width space loaded without a word.

    Calls naming ``amount`` are denied as undeclared (fail closed), and the author is not told
    why: an error at the name's line naming the character and its code point."""
    ((line, severity, message),) = _found(_args(name="amo\u200bunt"), "unclear_argument_name")
    assert line == 7
    assert severity is Severity.ERROR
    assert message == (
        "tool payments.refund: argument name 'amo\\u200bunt' holds invisible format character U+200B"
    )


def test_a_confusable_letter_in_an_argument_name_is_a_warning_everywhere_names_are_written() -> None:
    """Review R61: a Cyrillic 'о' (U+043E) in a declared, a loggable and a gate's ``when`` name
    is a warning at each, naming the letter; plain ASCII names draw nothing."""
    cyrillic = "am\u043eunt"
    found = _found(_args(name=cyrillic, logged=cyrillic, when=cyrillic), "unclear_argument_name")
    assert [(line, severity) for line, severity, _ in found] == [
        (7, Severity.WARNING),
        (8, Severity.WARNING),
        (15, Severity.WARNING),
    ]
    assert found[0][2] == (
        "tool payments.refund: argument name 'amоunt' holds U+043E CYRILLIC SMALL LETTER O, "
        "not ASCII: it may read as another letter"
    )
    assert found[2][2].startswith("approval gate big: argument name 'amоunt' holds U+043E")
    assert _found(_args(), "unclear_argument_name") == []


def test_a_space_in_an_argument_name_is_an_error() -> None:
    """A space, leading, trailing or inside, is an invisible part of the name: an error."""
    ((_, severity, message),) = _found(_args(logged="amount "), "unclear_argument_name")
    assert severity is Severity.ERROR
    assert message.endswith("holds a space U+0020")
