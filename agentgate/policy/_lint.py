"""Static lint: the four failure states of an authority boundary, found before anything runs.

Each check is one small rule object with a ``code``, a ``kind`` and a ``severity``; ``RULES``
lists them all, and adding a check is adding one class to that list. A rule reads the compiled
``Policy`` and yields findings that name the file and line and say how to fix it. docs/lint.md
explains every code.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import ClassVar

from agentgate.capabilities import (
    Capability,
    Constraint,
    Scalar,
    attenuates,
    intersects,
    pattern_matches,
    witness,
)
from agentgate.errors import PolicyError
from agentgate.findings import Finding, FindingKind, Severity
from agentgate.policy._index import _comparable, wild_ancestors
from agentgate.policy._load import Policy, RuleRef, describe
from agentgate.policy._schema import Argument

SCOPE = FindingKind.SCOPE_CREEP
INHERIT = FindingKind.IMPLICIT_TRUST_INHERITANCE
REVOKE = FindingKind.NON_REVOCABLE_GRANT
OPAQUE = FindingKind.AUTHORITY_CHAIN_OPACITY


class LintRule:
    """One check. Subclasses set the class attributes and implement ``check``."""

    code: ClassVar[str]
    kind: ClassVar[FindingKind]
    severity: ClassVar[Severity] = Severity.ERROR
    hint: ClassVar[str]

    def check(self, policy: Policy) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(
        self,
        policy: Policy,
        message: str,
        line: int | None,
        *,
        field: str | None = None,
        hint: str | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            kind=self.kind,
            code=self.code,
            message=message,
            severity=severity or self.severity,
            file=policy.source,
            line=line,
            field=field,
            hint=hint or self.hint,
        )


def _declared(policy: Policy) -> list[str]:
    doc = policy.document
    return [f"tool:{n}" for n in doc.tools] + [f"model:{n}" for n in doc.models]


def _action_within(child: str, parent: str) -> bool:
    return parent == "*" or child == parent


class _Holding:
    """``rules`` by pattern, to find the ones whose resource pattern holds a given one
    (``pattern_within``) by a few lookups (``wild_ancestors``) instead of comparing every rule
    with every other: a role of thousands of rules took minutes to lint, pair by pair."""

    def __init__(self, rules: tuple[RuleRef, ...]) -> None:
        self.exact: dict[str, list[tuple[int, RuleRef]]] = {}
        self.wild: dict[str, list[tuple[int, RuleRef]]] = {}
        self.every_wild: list[RuleRef] = []
        for position, rule in enumerate(rules):
            pattern = rule.capability.resource
            if pattern.endswith("*"):
                self.wild.setdefault(pattern, []).append((position, rule))
                self.every_wild.append(rule)
            else:
                self.exact.setdefault(pattern, []).append((position, rule))

    def holding(self, pattern: str) -> list[RuleRef]:
        """The rules whose resource pattern holds ``pattern`` (it, or a wildcard over it), in order."""
        found = [
            *self.exact.get(pattern, ()),
            *(f for p in wild_ancestors(pattern) for f in self.wild.get(p, ())),
        ]
        return [rule for _position, rule in sorted(found, key=lambda f: f[0])]

    def wider_wild(self, pattern: str) -> list[RuleRef]:
        """The wildcard rules whose pattern holds ``pattern``, in order."""
        found = [f for p in wild_ancestors(pattern) for f in self.wild.get(p, ())]
        return [rule for _position, rule in sorted(found, key=lambda f: f[0])]


def _held_by_role(policy: Policy, roles: Iterable[str]) -> dict[str, list[_Holding]]:
    """For each of ``roles``, the ``_Holding`` of each role it holds that has rules (itself
    first, then those it inherits, in closure order): each role's own rules are indexed once,
    never gathered anew for every role that inherits them (2,000 roles inheriting a 1,000-rule
    role took seconds per check). Looking a pattern up in each, in turn, finds the rules in the
    order the role holds them, as one ``_Holding`` of its ``effective_rules`` would."""
    own = {role: _Holding(rules) for role, rules in policy.rules.items() if rules}
    return {role: [own[r] for r in policy.role_closure(role) if r in own] for role in roles}


def _holding(held: list[_Holding], pattern: str) -> list[RuleRef]:
    """The rules of ``held`` (``_held_by_role``) whose pattern holds ``pattern``, in order."""
    return [rule for h in held for rule in h.holding(pattern)]


def _tools_by_pattern(policy: Policy) -> dict[str, list[str]]:
    """Every wildcard pattern that names a declared tool -> the tools it names, in declaration order."""
    out: dict[str, list[str]] = {}
    for name in policy.document.tools:
        for pattern in wild_ancestors(f"tool:{name}"):
            out.setdefault(pattern, []).append(name)
    return out


def _by_pattern(resources: list[str]) -> dict[str, list[str]]:
    """Every wildcard pattern that names one of ``resources`` -> those it names, in order."""
    out: dict[str, list[str]] = {}
    for resource in resources:
        for pattern in wild_ancestors(resource):
            out.setdefault(pattern, []).append(resource)
    return out


def _named_patterns(resources: list[str]) -> set[str]:
    """Every wildcard pattern that names one of ``resources``."""
    return {pattern for r in resources for pattern in wild_ancestors(r)}


# --- scope_creep -------------------------------------------------------------------------------------


class DelegatesUnheldCapability(LintRule):
    code = "delegates_unheld_capability"
    kind = SCOPE
    hint = "delegate only capabilities the role holds, or add the capability to the role"

    def check(self, policy: Policy) -> Iterator[Finding]:
        held_by_role = _held_by_role(policy, policy.delegable)
        for role, delegable in policy.delegable.items():
            held = held_by_role[role]
            for d in delegable:
                cap = d.capability
                if not any(
                    _action_within(cap.action, h.capability.action) for h in _holding(held, cap.resource)
                ):
                    yield self.finding(
                        policy, f"role {role} may delegate {describe(cap)}, which it does not hold", d.line
                    )


class DelegationWiderThanRole(LintRule):
    code = "delegation_wider_than_role"
    kind = SCOPE
    hint = "narrow the delegated constraints to within the role's own (or drop the delegation entry)"

    def check(self, policy: Policy) -> Iterator[Finding]:
        held_by_role = _held_by_role(policy, policy.delegable)
        for role, delegable in policy.delegable.items():
            held = held_by_role[role]
            for d in delegable:
                cap = d.capability
                named = [
                    h for h in _holding(held, cap.resource) if _action_within(cap.action, h.capability.action)
                ]
                if named and not any(attenuates(h.capability, cap) for h in named):
                    parent = named[0].capability
                    call = witness(parent, _typed(cap, parent, policy))
                    example = f"; e.g. {call.args}" if call is not None and call.args else ""
                    yield self.finding(
                        policy,
                        f"role {role} may delegate {describe(cap)}, wider than what it holds ({describe(parent)}){example}",
                        d.line,
                    )


# Every value of a declared type, as a constraint: what a witness may pick for an argument the
# delegated capability leaves open, so that the example is a call the tool would accept.
_ANY_OF_TYPE = {
    "string": Constraint(prefix=""),
    "integer": Constraint(ge=-(2**63)),
    "number": Constraint(ge=-sys.float_info.max),
    "boolean": Constraint(one_of=(True, False)),
}


def _typed(cap: Capability, parent: Capability, policy: Policy) -> Capability:
    """``cap`` with each argument ``parent`` constrains, ``cap`` leaves open and its tool declares
    held to the declared type: the same calls, less the ones the tool refuses by type, so that a
    witness names an amount, not the text ``"\\x00zz-witness"``."""
    tool = policy.document.tools.get(cap.resource.removeprefix("tool:"))
    if not cap.resource.startswith("tool:") or tool is None:
        return cap
    constrained = cap.constraint_map
    open_args = tuple(
        (a, _ANY_OF_TYPE[tool.args[a].type])
        for a, _ in parent.constraints
        if a not in constrained and a in tool.args
    )
    return Capability(cap.resource, cap.action, cap.constraints + open_args) if open_args else cap


class DelegatedBudgetAboveRole(LintRule):
    code = "delegated_budget_above_role"
    kind = SCOPE
    hint = "lower delegation.budget.limit to at most the role's budget, in the same unit"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            if role.delegation is None or role.delegation.budget is None or role.budget is None:
                continue
            d, own = role.delegation.budget, role.budget
            if d.unit != own.unit or d.limit > own.limit:
                yield self.finding(
                    policy,
                    f"role {name} may delegate a budget of {d.limit} {d.unit}, above its own {own.limit} {own.unit}",
                    policy.line_of("roles", name, "delegation", "budget"),
                )


class ApprovalGateBypass(LintRule):
    code = "approval_gate_bypass"
    kind = SCOPE
    hint = "widen the gate's resource pattern to the sibling tools, or narrow the rule to the gated tool"

    def check(self, policy: Policy) -> Iterator[Finding]:
        declared = _declared(policy)
        # What each pattern names, and the wildcard rules by pattern, by lookup: matching every
        # gate, rule and sibling against every declared tool made this check cost gates x rules
        # x tools (minutes for a policy of a few thousand of each).
        by_pattern = _by_pattern(declared)
        guarded = _gated_tools(policy, by_pattern, set(declared))
        gates_on: dict[str, list[str]] = {}  # tool -> the gates that guard it
        for g, named in guarded.items():
            for r in named:
                gates_on.setdefault(r, []).append(g)
        wild_rules = _wildcard_rules(policy)
        for gname, gate in policy.document.approvals.items():
            gated = guarded[gname]
            if not gated:
                continue
            reaching = _rules_reaching(gated, wild_rules)
            if not reaching:
                continue
            for rule, around in _paths_around(policy, gname, gated, reaching, by_pattern, gates_on):
                yield self.finding(
                    policy,
                    f"{rule} reaches {', '.join(sorted(around))}, which take the same arguments as "
                    f"{gate.resource} but pass no approval gate {gname}",
                    rule.line,
                )


def _gated_tools(
    policy: Policy, by_pattern: Mapping[str, Sequence[str]], known: set[str]
) -> dict[str, set[str]]:
    """The declared tools each approval gate guards, by gate name."""
    return {
        g: set(by_pattern.get(spec.resource, ())) if spec.resource.endswith("*") else {spec.resource} & known
        for g, spec in policy.document.approvals.items()
    }


def _wildcard_rules(policy: Policy) -> dict[str, list[tuple[int, int, RuleRef]]]:
    """The rules whose resource is a wildcard pattern, by pattern, each with its role's position
    and its index (the order the policy lists them in)."""
    wild_rules: dict[str, list[tuple[int, int, RuleRef]]] = {}
    for position, role in enumerate(policy.document.roles):
        for rule in policy.rules.get(role, ()):
            if rule.capability.resource.endswith("*"):
                wild_rules.setdefault(rule.capability.resource, []).append((position, rule.index, rule))
    return wild_rules


def _rules_reaching(
    gated: set[str], wild_rules: Mapping[str, list[tuple[int, int, RuleRef]]]
) -> list[tuple[int, int, RuleRef]]:
    """The wildcard rules that reach a tool in ``gated``, in the order the policy lists them."""
    return sorted(
        (found for pattern in _named_patterns(sorted(gated)) for found in wild_rules.get(pattern, ())),
        key=lambda found: found[:2],
    )


def _paths_around(
    policy: Policy,
    gname: str,
    gated: set[str],
    reaching: Sequence[tuple[int, int, RuleRef]],
    by_pattern: Mapping[str, Sequence[str]],
    gates_on: Mapping[str, list[str]],
) -> Iterator[tuple[RuleRef, list[str]]]:
    """Each rule of ``reaching`` with the sibling tools it opens around gate ``gname``: tools that
    take the same arguments, that no other gate stops, and on which the rule admits a call the gate
    would stop."""
    tools = policy.document.tools
    gate = policy.document.approvals[gname]
    # A sibling takes "the same arguments" when it declares those the gate looks at, or,
    # for a gate on every call, those of a tool the gate guards.
    looked_at = (
        {frozenset(gate.when)}
        if gate.when
        else {frozenset(tools[r.removeprefix("tool:")].args) for r in gated if r.startswith("tool:")}
    )
    sibling: dict[str, bool] = {}  # tool -> whether it takes the same arguments and no gate stops it
    conditions = policy.gate_conditions.get(gname, ())
    for _position, _index, rule in reaching:
        # A sibling is a path around the gate only for the calls the rule admits on
        # it that the gate would stop: `amount <= 500` does not get around `amount > 500`.
        around = []
        for r in by_pattern.get(rule.capability.resource, ()):
            open_path = sibling.get(r)
            if open_path is None:
                # A tool that another gate stops on every call this one stops is no path
                # around it (asked of the gates on that tool only, not of every gate).
                open_path = sibling[r] = (
                    r not in gated
                    and r.startswith("tool:")
                    and any(args <= tools[r.removeprefix("tool:")].args.keys() for args in looked_at)
                    and not any(
                        other != gname and _applies_whenever(policy, other, gname)
                        for other in gates_on.get(r, ())
                    )
                )
            if open_path and _admits_gated_call(
                rule.capability, conditions, tools[r.removeprefix("tool:")].args
            ):
                around.append(r)
        if around:
            yield rule, around


def _applies_whenever(policy: Policy, gate: str, than: str) -> bool:
    """Whether approval gate ``gate`` applies to every call gate ``than`` applies to: each of its
    conditions is one ``than`` sets too, at least as narrowly (a call missing the argument, or
    giving a value it cannot compare, needs approval from both)."""
    conditions = dict(policy.gate_conditions.get(than, ()))
    return all(
        arg in conditions and _within(conditions[arg], condition)
        for arg, condition in policy.gate_conditions.get(gate, ())
    )


@functools.lru_cache(maxsize=4096)
def _within(inner: Constraint, outer: Constraint) -> bool:
    """Whether every value ``inner`` admits, ``outer`` admits too."""
    return attenuates(
        Capability("tool:x", "invoke", (("v", outer),)), Capability("tool:x", "invoke", (("v", inner),))
    )


def _admits_gated_call(
    rule: Capability, conditions: tuple[tuple[str, Constraint], ...], args: Mapping[str, Argument]
) -> bool:
    """Whether ``rule`` admits a call on a tool declaring ``args`` that a gate with ``conditions``
    would stop: each argument the rule constrains is declared and can take a value of its type
    that the rule admits, and on each argument the gate looks at, some such value meets the
    condition. An argument the rule leaves open may take any value, or none (a gate without
    conditions stops every call)."""
    admitted: dict[str, Constraint] = {}
    for arg, constraint in rule.constraints:
        typed = _of_type(constraint, args[arg].type) if arg in args else None
        if typed is None:
            return False  # the tool refuses every call the rule admits
        admitted[arg] = typed
    return all(
        arg not in admitted or _condition_may_hold(admitted[arg], condition, args[arg].type)
        for arg, condition in conditions
    )


# A value of each declared type: whether a gate's condition can compare a value depends on its type only.
_OF_TYPE: dict[str, Scalar] = {"string": "", "integer": 0, "number": 0, "boolean": False}


def _condition_may_hold(admitted: Constraint, condition: Constraint, kind: str) -> bool:
    """Whether some value of the declared ``kind`` that ``admitted`` allows makes a gate's
    ``condition`` hold: it satisfies it, or is one the condition cannot compare (the gate then
    applies: fail closed, as in ``PolicyIndex``)."""
    if not _comparable(condition, _OF_TYPE[kind]):
        return True
    typed = _of_type(condition, kind)
    return typed is not None and intersects(admitted, typed)


def _of_type(constraint: Constraint, kind: str) -> Constraint | None:
    """The values of the declared ``kind`` that ``constraint`` allows, as a constraint, or ``None``
    when there is none. Integers are the whole numbers within the bounds, closed, so that two
    such constraints intersect exactly when an integer satisfies both."""
    if constraint.is_empty:
        return None
    listed = ((constraint.eq,) if constraint.eq is not None else ()) + (constraint.one_of or ())
    if listed:
        kept = tuple(v for v in listed if _fits(kind, v) and constraint.allows(v))
        return Constraint(one_of=kept) if kept else None
    if not _type_can_satisfy(kind, constraint):
        return None
    if kind == "integer":
        lo, hi = _least_integer(constraint), _greatest_integer(constraint)
        return Constraint(ge=None if math.isinf(lo) else lo, le=None if math.isinf(hi) else hi)
    return constraint


# --- implicit_trust_inheritance -----------------------------------------------------------------------


class AgentInheritsRole(LintRule):
    code = "agent_inherits_role"
    kind = INHERIT
    hint = "list the capabilities the agent needs instead of inheriting a whole role"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            if role.inherits and policy.is_agent_role(name):
                yield self.finding(
                    policy,
                    f"agent role {name} inherits {', '.join(role.inherits)} wholesale",
                    policy.line_of("roles", name, "inherits"),
                )


class InheritsRulesNotBudget(LintRule):
    code = "inherits_rules_not_budget"
    kind = INHERIT
    severity = Severity.WARNING
    hint = "give the role a budget of its own: inherits brings another role's rules, never its budget"

    def check(self, policy: Policy) -> Iterator[Finding]:
        roles = policy.document.roles
        for name, role in roles.items():
            if not role.inherits or role.budget is not None:
                continue
            budgeted = [r for r in policy.role_closure(name)[1:] if roles[r].budget is not None]
            if budgeted:
                first = roles[budgeted[0]].budget
                assert first is not None
                yield self.finding(
                    policy,
                    f"role {name} holds the rules of {', '.join(budgeted)} but no budget: its grants "
                    f"carry none, where {budgeted[0]}'s carry {first.limit} {first.unit}",
                    policy.line_of("roles", name, "inherits"),
                )


class WildcardCapabilityForAgent(LintRule):
    code = "wildcard_capability_for_agent"
    kind = INHERIT
    hint = "name the tools the agent needs; a wildcard also grants every tool added later"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name in policy.document.roles:
            if not policy.is_agent_role(name):
                continue
            for rule in policy.rules.get(name, ()):
                pattern = rule.capability.resource
                if pattern.endswith(":*"):
                    yield self.finding(
                        policy, f"agent role {name} holds every {pattern[:-2]}: {pattern}", rule.line
                    )
                elif pattern.endswith(".*"):
                    yield self.finding(
                        policy,
                        f"agent role {name} holds the wildcard {pattern}",
                        rule.line,
                        severity=Severity.WARNING,
                    )


class PrincipalWithoutKey(LintRule):
    code = "principal_without_key"
    kind = INHERIT
    hint = "give the principal its own 'did:' or 'key:'; without one it can only act on someone else's key"

    def check(self, policy: Policy) -> Iterator[Finding]:
        first_holder: dict[str, str] = {}
        for name, did in policy.principal_dids.items():
            line = policy.line_of("principals", name, key=True)
            if did is None:
                yield self.finding(policy, f"principal {name} has no key of its own", line)
            elif did in first_holder:
                yield self.finding(
                    policy,
                    f"principal {name} uses the same key as {first_holder[did]}: neither has its own",
                    line,
                )
            else:
                first_holder[did] = name
        anchors = {did: name for name, did in policy.anchor_dids.items() if did is not None}
        for name, spec in policy.document.principals.items():
            did = policy.principal_dids.get(name)
            if spec.kind == "agent" and did in anchors:
                yield self.finding(
                    policy,
                    f"agent {name} holds the key of trust anchor {anchors[did]}: it can issue itself any root grant",
                    policy.line_of("principals", name, key=True),
                    hint="give the agent its own key; keep trust anchor keys away from agents",
                )


class AgentApproves(LintRule):
    code = "agent_approves"
    kind = INHERIT
    hint = "name human principals as approvers; an approval gate is a person's sign-off"

    def check(self, policy: Policy) -> Iterator[Finding]:
        principals = policy.document.principals
        for gname, gate in policy.document.approvals.items():
            for i, approver in enumerate(gate.approvers):
                if principals[approver].kind == "agent" and approver not in gate.approvers[:i]:
                    yield self.finding(
                        policy,
                        f"approval gate {gname} names agent {approver} as an approver: its sign-off lets "
                        f"an agent's decision through where a person's was asked for",
                        policy.line_of("approvals", gname, "approvers", i),
                    )


class SubAgentSharesGrant(LintRule):
    code = "sub_agent_shares_grant"
    kind = INHERIT
    hint = "set share_grant: false; the delegator issues each sub-agent its own narrower grant"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            if role.delegation is not None and role.delegation.share_grant:
                yield self.finding(
                    policy,
                    f"role {name} lets sub-agents run on its own grant",
                    policy.line_of("roles", name, "delegation", "share_grant"),
                )


# --- non_revocable_grant ----------------------------------------------------------------------------


class RoleWithoutTtl(LintRule):
    code = "role_without_ttl"
    kind = REVOKE
    hint = "add ttl_s to the role (at most settings.max_ttl_s)"

    def check(self, policy: Policy) -> Iterator[Finding]:
        holding = _roles_holding_rules(policy)
        for name, role in policy.document.roles.items():
            if role.ttl_s is None and name in holding:
                yield self.finding(
                    policy, f"role {name} has no ttl_s", policy.line_of("roles", name, key=True)
                )


def _roles_holding_rules(policy: Policy) -> set[str]:
    """The roles that hold a rule, their own or one they inherit: the roles with rules, then every
    role that inherits one of them, found in one pass (not one closure per role)."""
    roles = policy.document.roles
    heirs: dict[str, list[str]] = {}
    for name, role in roles.items():
        for parent in role.inherits:
            heirs.setdefault(parent, []).append(name)
    holding = {name for name in roles if policy.rules.get(name)}
    pending = list(holding)
    while pending:
        for heir in heirs.get(pending.pop(), ()):
            if heir not in holding:
                holding.add(heir)
                pending.append(heir)
    return holding


class TtlAbovePolicyMax(LintRule):
    code = "ttl_above_policy_max"
    kind = REVOKE
    hint = "lower the TTL to at most settings.max_ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        limit = policy.document.settings.max_ttl_s
        for name, role in policy.document.roles.items():
            if role.ttl_s is not None and role.ttl_s > limit:
                yield self.finding(
                    policy,
                    f"role {name} ttl_s {role.ttl_s} is above the policy maximum {limit}",
                    policy.line_of("roles", name, "ttl_s"),
                )
            d = role.delegation
            if d is not None and d.max_ttl_s is not None and d.max_ttl_s > limit:
                yield self.finding(
                    policy,
                    f"role {name} delegation max_ttl_s {d.max_ttl_s} is above the policy maximum {limit}",
                    policy.line_of("roles", name, "delegation", "max_ttl_s"),
                )


class DelegationWithoutTtl(LintRule):
    code = "delegation_without_ttl"
    kind = REVOKE
    hint = "add delegation.max_ttl_s, shorter than the role's ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            d = role.delegation
            if d is not None and d.max_depth > 0 and d.max_ttl_s is None:
                yield self.finding(
                    policy,
                    f"role {name} may delegate with no limit on the delegated grant's life",
                    policy.line_of("roles", name, "delegation"),
                )


class DelegatedTtlAboveDelegator(LintRule):
    code = "delegated_ttl_above_delegator"
    kind = REVOKE
    hint = "a delegated grant must not outlive its parent: make delegation.max_ttl_s <= the role's ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            d = role.delegation
            if (
                d is not None
                and d.max_ttl_s is not None
                and role.ttl_s is not None
                and d.max_ttl_s > role.ttl_s
            ):
                yield self.finding(
                    policy,
                    f"role {name} may delegate grants living {d.max_ttl_s}s, longer than its own {role.ttl_s}s",
                    policy.line_of("roles", name, "delegation", "max_ttl_s"),
                )


class RevocationDisabled(LintRule):
    code = "revocation_disabled"
    kind = REVOKE
    hint = "remove 'revocation: false' / 'revocable: false'; a grant that cannot be revoked cannot be stopped"

    def check(self, policy: Policy) -> Iterator[Finding]:
        if not policy.document.settings.revocation:
            yield self.finding(
                policy,
                "revocation checks are switched off for the whole policy",
                policy.line_of("settings", "revocation"),
            )
        for name, role in policy.document.roles.items():
            if not role.revocable:
                yield self.finding(
                    policy,
                    f"grants for role {name} cannot be revoked",
                    policy.line_of("roles", name, "revocable"),
                )


# --- authority_chain_opacity -------------------------------------------------------------------------


class ToolWithoutRule(LintRule):
    code = "tool_without_rule"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "grant the tool to a role, or remove its declaration"

    def check(self, policy: Policy) -> Iterator[Finding]:
        exact = {r.capability.resource for rules in policy.rules.values() for r in rules}
        wild = {p for p in exact if p.endswith("*")}
        for name in policy.document.tools:
            resource = f"tool:{name}"
            if resource not in exact and not any(p in wild for p in wild_ancestors(resource)):
                yield self.finding(
                    policy, f"no role can call {resource}", policy.line_of("tools", name, key=True)
                )


class RuleForUndeclaredResource(LintRule):
    code = "rule_for_undeclared_resource"
    kind = OPAQUE
    hint = "check the spelling against the tools and models sections, or declare the tool"

    def check(self, policy: Policy) -> Iterator[Finding]:
        declared = _declared(policy)
        known = set(declared)
        named = _named_patterns(declared)
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                pattern = rule.capability.resource
                if pattern.startswith("gpu:"):
                    continue
                if pattern.endswith("*"):
                    if pattern not in named:
                        yield self.finding(
                            policy,
                            f"{rule} names no declared tool or model",
                            rule.line,
                            severity=Severity.WARNING,
                        )
                elif pattern not in known:
                    yield self.finding(
                        policy,
                        f"{rule} names {pattern}, which is not declared: it can never match",
                        rule.line,
                    )
        # A quota on a misspelt resource counts nothing: the calls it was written to limit run
        # without limit, and the policy reads as if they were limited.
        for name, quota in policy.document.quotas.items():
            if "resources" not in quota.model_fields_set:
                continue  # the default (tool:*, model:*) names whatever is declared
            for i, pattern in enumerate(quota.resources):
                if pattern.startswith("gpu:"):
                    continue
                line = policy.line_of("quotas", name, "resources", i)
                if pattern.endswith("*"):
                    if pattern not in named:
                        yield self.finding(
                            policy,
                            f"quota {name} counts {pattern}, which names no declared tool or model",
                            line,
                            severity=Severity.WARNING,
                        )
                elif pattern not in known:
                    yield self.finding(
                        policy,
                        f"quota {name} counts {pattern}, which is not declared: it counts nothing, "
                        "and the calls it was written to limit run without it",
                        line,
                    )


class QuotaCountsNothing(LintRule):
    code = "quota_counts_nothing"
    kind = OPAQUE
    hint = (
        "count resources whose calls use the quota's unit (tokens: models; usd_micros: models and "
        "GPU types priced under gpus), or count calls"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        # The Gate charges a quota what the call costs in the quota's unit (gate/_costs.py): a
        # tool call costs one call and nothing else, a lease money only for a GPU type priced
        # under gpus. A quota in a unit none of its resources' calls use counts nothing: the
        # calls it was written to limit run without limit, and the policy reads as if they were.
        priced_gpus = [f"gpu:{n}" for n, gpu in policy.document.gpus.items() if gpu.cost_per_gpu_hour > 0]
        priced = frozenset(priced_gpus) | _named_patterns(priced_gpus)  # looked up, not matched in turn
        for name, quota in policy.document.quotas.items():
            if not quota.resources:
                yield self.finding(
                    policy,
                    f"quota {name} lists no resources: it counts nothing",
                    policy.line_of("quotas", name, "resources"),
                )
                continue
            dead = [p for p in quota.resources if not _costs_in(quota.unit, p, priced)]
            if len(dead) == len(quota.resources):
                yield self.finding(
                    policy,
                    f"quota {name} counts {quota.unit}, which no call on {', '.join(quota.resources)} uses: "
                    "it counts nothing, and the calls it was written to limit run without it",
                    policy.line_of("quotas", name, "unit"),
                )
                continue
            if "resources" not in quota.model_fields_set:
                continue  # the default (tool:*, model:*) counts what the unit can, not a choice made here
            for pattern in dead:
                yield self.finding(
                    policy,
                    f"quota {name} counts {quota.unit}, which calls on {pattern} do not use: the entry counts nothing",
                    policy.line_of("quotas", name, "resources", quota.resources.index(pattern)),
                    severity=Severity.WARNING,
                )


def _costs_in(unit: str, pattern: str, priced: AbstractSet[str]) -> bool:
    """Whether a call on a resource ``pattern`` names can cost something in ``unit``; ``priced``:
    the priced GPU types and every wildcard pattern that names one (``_named_patterns``), so that
    a quota's entry is one lookup, not a match against every GPU type (2,000 quotas on 2,000
    priced types took 1.4 s)."""
    if unit == "calls":
        return True
    if pattern.startswith("model:"):
        return True
    return unit == "usd_micros" and pattern in priced


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
                for name in _tools_named(cap.resource, tools, by_pattern):
                    missing = [a for a, _ in cap.constraints if a not in tools[name].args]
                    if missing:
                        yield self.finding(
                            policy,
                            f"{rule} constrains {', '.join(missing)}, which tool:{name} does not declare: it never matches",
                            rule.line,
                        )


def _tools_named(pattern: str, tools: Mapping[str, object], by_pattern: Mapping[str, list[str]]) -> list[str]:
    """The declared tools ``pattern`` names, in declaration order (``by_pattern``: ``_tools_by_pattern``)."""
    if not pattern.startswith("tool:"):
        return []
    if not pattern.endswith("*"):
        name = pattern.removeprefix("tool:")
        return [name] if name in tools else []
    return by_pattern.get(pattern, [])


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
                        f"{rule}: no value of {', '.join(empty)} satisfies it: it never matches",
                        rule.line,
                    )
        for gname, conditions in policy.gate_conditions.items():
            empty = [a for a, c in conditions if c.is_empty]
            if empty:
                yield self.finding(
                    policy,
                    f"approval gate {gname}: no value of {', '.join(empty)} satisfies its condition",
                    policy.line_of("approvals", gname, "when"),
                )


class ConstraintTypeMismatch(LintRule):
    code = "constraint_type_mismatch"
    kind = OPAQUE
    hint = "use numeric bounds on integer/number arguments, prefix on strings, values of the declared type"

    def check(self, policy: Policy) -> Iterator[Finding]:
        tools = policy.document.tools
        by_pattern = _tools_by_pattern(policy)
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                for name in _tools_named(rule.capability.resource, tools, by_pattern):
                    for arg, c in rule.capability.constraints:
                        decl = tools[name].args.get(arg)
                        if decl is not None and not c.is_empty and not _type_can_satisfy(decl.type, c):
                            yield self.finding(
                                policy,
                                f"{rule}: {arg} is {_article(decl.type)} {decl.type} but the constraint "
                                f"{_written(c)} admits no {decl.type}",
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
                            f"approval gate {gname}: {arg} of tool:{name} is {_article(decl.type)} "
                            f"{decl.type} but the condition {_written(c)} admits no {decl.type}",
                            policy.line_of("approvals", gname, "when"),
                        )


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def _written(constraint: Constraint) -> str:
    """The operators as JSON, so that a value keeps its type: ``{"eq": "5"}`` is text, not 5."""
    return json.dumps(constraint.to_dict(), ensure_ascii=False)


def _type_can_satisfy(kind: str, constraint: Constraint) -> bool:
    """Whether some value of the declared ``kind`` satisfies ``constraint`` (exactly)."""
    ops = constraint.to_dict()
    numeric = kind in ("integer", "number")
    bounded = any(op in ops for op in ("lt", "le", "gt", "ge"))
    if bounded and not numeric:
        return False
    if "prefix" in ops and kind != "string":
        return False
    listed = ops.get("in")
    values: list[object] = [ops["eq"]] if "eq" in ops else list(listed) if isinstance(listed, list) else []
    if values:  # a finite set: one of the values it keeps must be of the type
        return any(_fits(kind, v) and constraint.allows(v) for v in values)
    if kind == "integer" and bounded:  # an interval: it must hold a whole number
        return _least_integer(constraint) <= _greatest_integer(constraint)
    return True


def _least_integer(c: Constraint) -> float:
    """The least integer the lower bounds admit (``-inf`` when there is none); exact at any size."""
    candidates: list[float] = [-math.inf]
    if c.gt is not None:
        candidates.append(math.floor(c.gt) + 1)
    if c.ge is not None:
        candidates.append(math.ceil(c.ge))
    return max(candidates)


def _greatest_integer(c: Constraint) -> float:
    """The greatest integer the upper bounds admit (``inf`` when there is none); exact at any size."""
    candidates: list[float] = [math.inf]
    if c.lt is not None:
        candidates.append(math.ceil(c.lt) - 1)
    if c.le is not None:
        candidates.append(math.floor(c.le))
    return min(candidates)


def _fits(kind: str, value: object) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return kind == "number" or float(value).is_integer()


class ShadowedRule(LintRule):
    code = "shadowed_rule"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "remove the narrower rule, or narrow the wider one if the narrower was meant"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A role's rules are looked up in those of the roles it holds (at most MAX_ROLES_HELD),
        # and each rule meets at most MAX_RULES_ON_ONE_RESOURCE on its own pattern.
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


class TrustAnchorWithoutKey(LintRule):
    code = "trust_anchor_without_key"
    kind = OPAQUE
    hint = "give the anchor 'did:' or 'key:'; a root grant from it could not be verified"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, did in policy.anchor_dids.items():
            if did is None:
                yield self.finding(
                    policy, f"trust anchor {name} has no key", policy.line_of("trust_anchors", name, key=True)
                )


class ToolNotAudited(LintRule):
    code = "tool_not_audited"
    kind = OPAQUE
    hint = "remove 'audit: false'; arguments are digested, and 'loggable' chooses what is kept in clear"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, tool in policy.document.tools.items():
            if not tool.audit:
                yield self.finding(
                    policy,
                    f"calls to tool:{name} would not be audited",
                    policy.line_of("tools", name, "audit"),
                )


class GateOnUndeclaredArgument(LintRule):
    code = "gate_on_undeclared_argument"
    kind = OPAQUE
    hint = "name an argument the guarded tool declares"

    def check(self, policy: Policy) -> Iterator[Finding]:
        document = policy.document
        tools = document.tools
        by_pattern = _tools_by_pattern(policy)
        for gname, gate in document.approvals.items():
            kind = gate.resource.partition(":")[0]
            if kind in ("model", "gpu"):
                # Model and GPU calls have the arguments agentgate gives them (max_tokens,
                # priority; count), declared nowhere: the gate must name a declared model or type.
                declared = document.models if kind == "model" else document.gpus
                if not any(pattern_matches(gate.resource, f"{kind}:{n}") for n in declared):
                    yield self.finding(
                        policy,
                        f"approval gate {gname} guards {gate.resource}, which names no declared "
                        + ("model" if kind == "model" else "GPU type"),
                        policy.line_of("approvals", gname, "resource"),
                        hint=f"make the gate's resource name a {kind} declared under {kind}s:",
                    )
                continue
            names = _tools_named(gate.resource, tools, by_pattern)
            if not names:
                yield self.finding(
                    policy,
                    f"approval gate {gname} guards {gate.resource}, which names no declared tool",
                    policy.line_of("approvals", gname, "resource"),
                    hint="make the gate's resource name a tool declared under tools:",
                )
                continue
            for name in names:
                missing = sorted(a for a in gate.when if a not in tools[name].args)
                if missing:
                    yield self.finding(
                        policy,
                        f"approval gate {gname} looks at {', '.join(missing)}, which tool:{name} does not declare",
                        policy.line_of("approvals", gname, "when"),
                    )


RULES: tuple[LintRule, ...] = (
    DelegatesUnheldCapability(),
    DelegationWiderThanRole(),
    DelegatedBudgetAboveRole(),
    ApprovalGateBypass(),
    AgentInheritsRole(),
    InheritsRulesNotBudget(),
    WildcardCapabilityForAgent(),
    PrincipalWithoutKey(),
    AgentApproves(),
    SubAgentSharesGrant(),
    RoleWithoutTtl(),
    TtlAbovePolicyMax(),
    DelegationWithoutTtl(),
    DelegatedTtlAboveDelegator(),
    RevocationDisabled(),
    ToolWithoutRule(),
    RuleForUndeclaredResource(),
    QuotaCountsNothing(),
    ConstraintOnUndeclaredArgument(),
    ContradictoryConstraint(),
    ConstraintTypeMismatch(),
    ShadowedRule(),
    TrustAnchorWithoutKey(),
    ToolNotAudited(),
    GateOnUndeclaredArgument(),
)
"""Every lint rule, in the order their findings are reported for the same line."""


def lint(policy: Policy, rules: tuple[LintRule, ...] = RULES) -> tuple[Finding, ...]:
    """Every finding of ``rules`` on ``policy``, ordered by line. Never raises for a loaded policy;
    anything but a ``Policy`` is a ``PolicyError``."""
    if not isinstance(policy, Policy):
        raise PolicyError(
            f"lint takes a Policy (from load_policy or parse_policy), got {type(policy).__name__}"
        )
    findings = [f for rule in rules for f in rule.check(policy)]
    return tuple(sorted(findings, key=lambda f: (f.line if f.line is not None else 0, f.code)))
