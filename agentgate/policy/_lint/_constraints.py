"""Lint rules on constraints (authority_chain_opacity): a rule that constrains an argument its
tool does not declare, a constraint or an approval gate's condition that no value satisfies, or
no value of the argument's declared type, an empty prefix (which every text satisfies), a role's
rule holding a number no grant token carries, and a rule shadowed by another that allows
everything it allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from agentgate.capabilities import Constraint, attenuates, token_refusal
from agentgate.findings import Finding, Severity
from agentgate.policy._lint._common import (
    OPAQUE,
    LintRule,
    _held_by_role,
    _integer_beyond_range,
    _listed,
    _quoted,
    _tools_by_pattern,
    _tools_named,
    _type_can_satisfy,
)
from agentgate.policy._load import Policy, json_text
from agentgate.policy._schema import Tool


class ConstraintOnUndeclaredArgument(LintRule):
    code = "constraint_on_undeclared_argument"
    kind = OPAQUE
    hint = "constrain an argument the tool declares (a call with an undeclared argument is denied)"

    def check(self, policy: Policy) -> Iterator[Finding]:
        tools = policy.document.tools
        by_pattern = _tools_by_pattern(policy)
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                cap = rule.capability
                # One finding for each set of missing arguments, naming the tools that lack them:
                # until review R66 one for each tool (a rule on a pattern naming 1,000 tools, 1,000
                # findings of the same words).
                lacking: dict[tuple[str, ...], list[str]] = {}
                for name in _tools_named(cap.resource, tools, by_pattern):
                    missing = tuple(a for a, _ in cap.constraints if a not in tools[name].args)
                    if missing:
                        lacking.setdefault(missing, []).append(f"tool:{name}")
                for missing, names in lacking.items():
                    args = ", ".join(map(_quoted, missing))
                    yield self.finding(
                        policy,
                        f"{rule} constrains {args}, which {names[0]} does not declare: it never matches"
                        if len(names) == 1
                        else f"{rule} constrains {args}, which {_listed(names)} do not declare: it never "
                        "matches a call on them",
                        rule.line,
                    )


class ContradictoryConstraint(LintRule):
    code = "contradictory_constraint"
    kind = OPAQUE
    hint = "fix the bounds so that some value satisfies all of them"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                empty = [a for a, c in rule.capability.constraints if c.is_empty]
                if empty:
                    yield self.finding(
                        policy,
                        f"{rule}: no value of {', '.join(map(_quoted, empty))} satisfies it: it never matches",
                        rule.line,
                    )
        for gname, conditions in policy.gate_conditions.items():
            empty = [a for a, c in conditions if c.is_empty]
            if empty:
                yield self.finding(
                    policy,
                    f"approval gate {gname}: no value of {', '.join(map(_quoted, empty))} satisfies its condition",
                    policy.line_of("approvals", gname, "when"),
                )


class EmptyPrefix(LintRule):
    code = "empty_prefix"
    kind = OPAQUE
    hint = "write the prefix the values must start with; for any text, leave the operator out"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # Every text starts with "": ``url: {prefix: ""}`` reads as a bound and allows any URL,
        # as a template left unfilled (``prefix: "${PREFIX}"``) writes it. Until review R60 lint
        # said nothing. A gate's ``when`` is not read: there it only makes the gate apply more.
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                for arg, c in rule.capability.constraints:
                    if c.prefix == "":
                        yield self.finding(
                            policy,
                            f"{rule}: the prefix of {_quoted(arg)} is empty: every text starts with it, so it bounds nothing",
                            rule.line,
                        )


class RoleGrantNotIssuable(LintRule):
    code = "role_grant_not_issuable"
    kind = OPAQUE
    hint = (
        "write the rule's numbers as integers within |v| < 2**63, in minor units (le: 50050 for "
        "500.50 in cents)"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A role's rules are what a grant for it carries (``role_grant_template``: Gate.issue and
        # ``grant issue --role``), and a token carries integers only: until review R83 a rule
        # ``amount: {le: 500.5}`` (or ``le: 1.0e+19``) loaded and linted clean, and every grant
        # for the role was refused by ``issue``. The policy's decisions compare such a number as
        # it is, so it loads; a delegation rule (a bound on grants made elsewhere) and a gate's
        # ``when`` (compared with a call's arguments) never go into a token, and are not read.
        for rules in policy.rules.values():
            for rule in rules:
                for arg, c in rule.capability.constraints:
                    why = token_refusal(c)
                    if why is not None:
                        yield self.finding(
                            policy,
                            f"{rule}: argument {_quoted(arg)}: {why}: no grant holding this rule "
                            f"can be issued (Gate.issue and grant issue --role refuse role {rule.role}'s, "
                            "and those of the roles that inherit it)",
                            rule.line,
                        )


class ConstraintTypeMismatch(LintRule):
    code = "constraint_type_mismatch"
    kind = OPAQUE
    hint = "use numeric bounds on integer/number arguments, prefix on strings, values of the declared type"

    def check(self, policy: Policy) -> Iterator[Finding]:
        tools = policy.document.tools
        by_pattern = _tools_by_pattern(policy)
        declared: dict[str, dict[str, dict[str, int]]] = {}  # pattern -> _types_declared, once
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                pattern = rule.capability.resource
                if pattern not in declared:
                    declared[pattern] = _types_declared(_tools_named(pattern, tools, by_pattern), tools)
                types = declared[pattern]
                # Once for each argument and type the named tools declare, in the order they first
                # do: until review R65b, once for each tool (the same message for each of a
                # pattern's tools, and rules x tools checks).
                mismatches = sorted(
                    (first, position, arg, kind, c)
                    for position, (arg, c) in enumerate(rule.capability.constraints)
                    if not c.is_empty
                    for kind, first in types.get(arg, {}).items()
                    if not _type_can_satisfy(kind, c)
                )
                for _first, _position, arg, kind, c in mismatches:
                    yield self.finding(
                        policy,
                        f"{rule}: {_quoted(arg)} is {_article(kind)} {kind} but the constraint "
                        f"{_written(c)} admits no {_kind_given(kind, c)}",
                        rule.line,
                    )
        # A gate's condition that no value of the type satisfies does not say when the gate
        # applies: a call it cannot compare needs approval (fail closed), any other never does.
        for gname, gate in policy.document.approvals.items():
            for name in _tools_named(gate.resource, tools, by_pattern):
                for arg, c in policy.gate_conditions.get(gname, ()):
                    decl = tools[name].args.get(arg)
                    if decl is not None and not c.is_empty and not _type_can_satisfy(decl.type, c):
                        yield self.finding(
                            policy,
                            f"approval gate {gname}: {_quoted(arg)} of tool:{name} is {_article(decl.type)} "
                            f"{decl.type} but the condition {_written(c)} admits no {_kind_given(decl.type, c)}",
                            policy.line_of("approvals", gname, "when"),
                        )


def _types_declared(names: Iterable[str], tools: Mapping[str, Tool]) -> dict[str, dict[str, int]]:
    """For each argument the tools ``names`` declare, each type they declare it with and the
    position (in ``names``) of the first tool that does."""
    out: dict[str, dict[str, int]] = {}
    for position, name in enumerate(names):
        for arg, decl in tools[name].args.items():
            out.setdefault(arg, {}).setdefault(decl.type, position)
    return out


def _kind_given(kind: str, constraint: Constraint) -> str:
    """The values of ``kind`` that ``constraint`` admits none of, as a message names them: an
    integer bound beyond what a call may give says so (``gt: 9223372036854775807`` admits 2**63)."""
    beyond = kind == "integer" and _integer_beyond_range(constraint)
    return f"{kind} a call may give (-2**63 < v < 2**63)" if beyond else kind


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def _written(constraint: Constraint) -> str:
    """The operators as JSON, so that a value keeps its type: ``{"eq": "5"}`` is text, not 5."""
    return json_text(constraint.to_dict())


class ShadowedRule(LintRule):
    code = "shadowed_rule"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "remove the narrower rule, or narrow the wider one if the narrower was meant"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A role's rules are looked up in those of the roles it holds (at most MAX_ROLES_HELD),
        # and each rule meets at most MAX_RULES_ON_ONE_RESOURCE on its own pattern and on each
        # wildcard pattern over it that the role holds rules on (each pattern capped at load).
        # Only a role's own rules can be shadowed: roles without rules have none to check.
        for role, held in _held_by_role(policy, (r for r, rules in policy.rules.items() if rules)).items():
            for rule in policy.rules[role]:
                cap = rule.capability
                # Only a rule whose pattern holds this one's can allow everything it allows; a
                # rule that no call satisfies (an empty constraint) is within every rule. In
                # the order the role holds them: the roles in closure order, each in file order.
                empty = any(c.is_empty for _a, c in cap.constraints)
                same = [r for h in held if cap.resource in h.exact for _p, r in h.exact[cap.resource]]
                wider = [
                    r for h in held if h.wild for r in (h.every_wild if empty else h.wider_wild(cap.resource))
                ]
                candidates = [*same, *wider]
                for other in candidates:
                    if other is rule:
                        continue
                    # Of two equal rules, the role's own repeats an inherited one, or the later
                    # of its own repeats the earlier: that one is reported.
                    if attenuates(other.capability, cap) and (
                        not attenuates(cap, other.capability)
                        or other.role != rule.role
                        or other.index < rule.index
                    ):
                        yield self.finding(
                            policy,
                            f"{rule} is shadowed by {other}, which allows everything it allows",
                            rule.line,
                        )
                        break
