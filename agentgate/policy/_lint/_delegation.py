"""Lint rules on delegation: a role that may delegate what it does not hold, more widely than
it holds it, or a larger budget than its own (scope_creep), and sub-agents that run on the
delegator's own grant (implicit_trust_inheritance).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from agentgate.capabilities import Capability, Constraint, attenuates, witness
from agentgate.findings import Finding
from agentgate.policy._lint._common import INHERIT, SCOPE, LintRule, _held_by_role, _Holding
from agentgate.policy._load import Policy, RuleRef, describe


def _action_within(child: str, parent: str) -> bool:
    return parent == "*" or child == parent


def _holding(held: list[_Holding], pattern: str) -> list[RuleRef]:
    """The rules of ``held`` (``_held_by_role``) whose pattern holds ``pattern``, in order."""
    return [rule for h in held for rule in h.holding(pattern)]


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
    "integer": Constraint(ge=-(2**63 - 1)),
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


class SubAgentSharesGrant(LintRule):
    code = "sub_agent_shares_grant"
    kind = INHERIT
    hint = "set share_grant: false; the delegator issues each sub-agent its own narrower grant"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            if role.delegation is not None and role.delegation.share_grant:
                yield self.finding(
                    policy,
                    f"role {name} asks that sub-agents run on its own grant; agentgate refuses a sub-agent "
                    "on its delegator's identity",
                    policy.line_of("roles", name, "delegation", "share_grant"),
                )
