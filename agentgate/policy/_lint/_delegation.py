"""Lint rules on delegation: a role that may delegate what it does not hold, more widely than
it holds it, or a larger budget than its own (scope_creep), sub-agents that run on the
delegator's own grant (implicit_trust_inheritance), and capabilities to hand on that no holder
can hand on (authority_chain_opacity).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from agentgate.capabilities import Capability, Constraint, attenuates, witness
from agentgate.findings import Finding, Severity
from agentgate.policy._lint._common import INHERIT, OPAQUE, SCOPE, LintRule, _held_by_role, _Holding
from agentgate.policy._load import Policy, RuleRef, describe


def _action_within(child: str, parent: str) -> bool:
    return parent == "*" or child == parent


def _holding(held: list[_Holding], pattern: str) -> list[RuleRef]:
    """The rules of ``held`` (``_held_by_role``) whose pattern holds ``pattern``, in order."""
    return [rule for h in held for rule in h.holding(pattern)]


def _delegations_and_holdings(policy: Policy) -> Iterator[tuple[str, RuleRef, list[RuleRef]]]:
    """Each delegation entry of each role, with the rules the role holds that name the entry's
    resource and action (its pattern holds the resource, its action is the same or ``*``), in order."""
    held_by_role = _held_by_role(policy, policy.delegable)
    for role, delegable in policy.delegable.items():
        held = held_by_role[role]
        for d in delegable:
            cap = d.capability
            named = [
                h for h in _holding(held, cap.resource) if _action_within(cap.action, h.capability.action)
            ]
            yield role, d, named


class DelegatesUnheldCapability(LintRule):
    code = "delegates_unheld_capability"
    kind = SCOPE
    hint = "delegate only capabilities the role holds, or add the capability to the role"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for role, d, named in _delegations_and_holdings(policy):
            if not named:
                yield self.finding(
                    policy,
                    f"role {role} may delegate {describe(d.capability)}, which it does not hold",
                    d.line,
                )


class DelegationWiderThanRole(LintRule):
    code = "delegation_wider_than_role"
    kind = SCOPE
    hint = "narrow the delegated constraints to within the role's own (or drop the delegation entry)"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for role, d, named in _delegations_and_holdings(policy):
            cap = d.capability
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


class DelegationWithoutDepth(LintRule):
    code = "delegation_without_depth"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "set delegation.max_depth to 1 or more, or remove the delegation capabilities"

    def check(self, policy: Policy) -> Iterator[Finding]:
        document = policy.document
        depth = {
            name: role.delegation.max_depth if role.delegation and name in policy.ruling_roles else 0
            for name, role in document.roles.items()
        }
        # A grant goes as deep as the deepest role its holder holds that holds a rule (a role
        # holding none lifts no bound: ``Policy.ruling_roles``), and each held role's entries
        # bound what the holder hands on (PolicyIndex.delegation_fault): a role at depth 0 still
        # hands on its capabilities for a holder that holds a deeper role too, or that is
        # delegated to in a chain two steps deep or more, which any principal's roles may allow.
        if any(max((depth[r] for r in p.roles), default=0) >= 2 for p in document.principals.values()):
            return
        deeper_held = {
            r for p in document.principals.values() if any(depth[h] > 0 for h in p.roles) for r in p.roles
        }
        for name, role in document.roles.items():
            d = role.delegation
            if d is None or d.max_depth > 0 or not d.capabilities or name in deeper_held:
                continue
            n = len(d.capabilities)
            yield self.finding(
                policy,
                f"role {name} lists {n} {'capability' if n == 1 else 'capabilities'} to hand on, but its "
                "delegation.max_depth is 0 and no holder of it holds a role that delegates: a grant for "
                "it takes no delegation step, so none is ever handed on",
                policy.line_of("roles", name, "delegation", "max_depth"),
            )
