"""Policy evaluation: an index built once, so a decision looks rules up instead of scanning them.

For each role the index holds a dict from every declared resource to the rules whose pattern
names it (exact rules, and wildcard rules matched once at build time), plus the wildcard rules
for resources the policy does not declare (``gpu:``). A principal maps to its roles (inherited
ones included), an approval gate and a quota to the resources they name. A decision is then a
few dict lookups and the constraint checks of the few rules that name the resource: its cost
does not grow with the number of rules.

Default deny: an unknown principal, an undeclared tool or model, an undeclared or mistyped
argument, or no rule that covers the call is a deny that says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from agentgate.capabilities import Call, Capability, Constraint, covers, pattern_matches
from agentgate.errors import PolicyError
from agentgate.policy._load import Policy, RuleRef
from agentgate.policy._schema import Budget, Tool

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


class Outcome(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


@dataclass(frozen=True)
class ApprovalRequirement:
    """The approval gate a call must pass before it runs."""

    gate: str
    approvers: tuple[str, ...]
    """Principal names that may approve."""
    approver_dids: tuple[str | None, ...]
    """Their did:keys, in the same order (``None`` for one without a key)."""
    quorum: int
    expiry_s: int
    conditions: tuple[tuple[str, Constraint], ...]
    """The gate's ``when`` constraints (empty: every call)."""
    line: int | None = None


@dataclass(frozen=True)
class QuotaRef:
    """A quota that counts the call."""

    name: str
    subject: str
    """``tenant:NAME``, ``principal:NAME`` or ``role:NAME``."""
    window_s: int
    limit: int
    unit: str
    line: int | None = None


@dataclass(frozen=True)
class PolicyDecision:
    """What the policy says about one call by one principal, and why."""

    outcome: Outcome
    principal: str | None
    """The principal's name in the policy (``None`` when unknown)."""
    resource: str
    role: str | None = None
    """The role whose rule allows the call."""
    rule: RuleRef | None = None
    """The rule that allows the call (its constraints are ``rule.capability.constraints``)."""
    budget: Budget | None = None
    """The allowing role's budget."""
    quotas: tuple[QuotaRef, ...] = ()
    approval: ApprovalRequirement | None = None
    reasons: tuple[str, ...] = ()
    """Why, in sentences: the rule that allowed it, or each reason it was refused."""

    @property
    def allowed(self) -> bool:
        """True only for a plain allow (an approval-required call is not allowed yet)."""
        return self.outcome is Outcome.ALLOW


class GrantTemplate(NamedTuple):
    """Exactly what a root grant for a role may contain."""

    capabilities: tuple[Capability, ...]
    budget: Budget | None
    ttl_s: int
    """The role's TTL, capped by the policy's ``max_ttl_s`` (never unbounded)."""
    max_depth: int


@dataclass(frozen=True)
class _Gate:
    name: str
    pattern: str
    requirement: ApprovalRequirement


@dataclass(frozen=True)
class _Quota:
    ref: QuotaRef
    patterns: tuple[str, ...]


class _Principal(NamedTuple):
    name: str
    roles: tuple[str, ...]
    quotas: tuple[_Quota, ...]


class PolicyIndex:
    """Answers ``evaluate(principal, call)`` for one ``Policy``; build once, query many times."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        doc = policy.document
        declared = [f"tool:{n}" for n in doc.tools] + [f"model:{n}" for n in doc.models]
        self._tools: dict[str, Tool] = {f"tool:{n}": t for n, t in doc.tools.items()}
        self._models = frozenset(f"model:{n}" for n in doc.models)
        self._by_role: dict[str, dict[str, tuple[RuleRef, ...]]] = {}
        self._wild_by_role: dict[str, tuple[RuleRef, ...]] = {}
        for role in doc.roles:
            table: dict[str, list[RuleRef]] = {}
            wild: list[RuleRef] = []
            for rule in policy.rules.get(role, ()):
                pattern = rule.capability.resource
                if pattern.endswith("*"):
                    wild.append(rule)
                    for resource in declared:
                        if pattern_matches(pattern, resource):
                            table.setdefault(resource, []).append(rule)
                else:
                    table.setdefault(pattern, []).append(rule)
            self._by_role[role] = {r: tuple(sorted(v, key=lambda x: x.index)) for r, v in table.items()}
            self._wild_by_role[role] = tuple(wild)
        self._gates: dict[str, tuple[_Gate, ...]] = {}
        self._wild_gates: list[_Gate] = []
        for name, gate in doc.approvals.items():
            compiled = _Gate(
                name,
                gate.resource,
                ApprovalRequirement(
                    name,
                    tuple(gate.approvers),
                    tuple(policy.principal_dids.get(a) for a in gate.approvers),
                    gate.quorum,
                    gate.expiry_s,
                    policy.gate_conditions.get(name, ()),
                    policy.line_of("approvals", name),
                ),
            )
            if gate.resource.endswith("*"):
                self._wild_gates.append(compiled)
                for resource in declared:
                    if pattern_matches(gate.resource, resource):
                        self._gates[resource] = (*self._gates.get(resource, ()), compiled)
            else:
                self._gates[gate.resource] = (*self._gates.get(gate.resource, ()), compiled)
        self._principals: dict[str, _Principal] = {}
        for name, spec in doc.principals.items():
            roles = policy.principal_roles(name)
            quotas = tuple(
                _Quota(
                    QuotaRef(
                        qname,
                        f"tenant:{q.tenant}"
                        if q.tenant
                        else f"principal:{q.principal}"
                        if q.principal
                        else f"role:{q.role}",
                        q.window_s,
                        q.limit,
                        q.unit,
                        policy.line_of("quotas", qname),
                    ),
                    tuple(q.resources),
                )
                for qname, q in doc.quotas.items()
                if (q.tenant is not None and q.tenant == spec.tenant)
                or q.principal == name
                or (q.role is not None and q.role in roles)
            )
            entry = _Principal(name, roles, quotas)
            self._principals[name] = entry
            did = policy.principal_dids.get(name)
            if did is not None:
                self._principals.setdefault(did, entry)

    def principal_name(self, principal: str) -> str | None:
        """The policy name of a principal given by name or did:key, or ``None`` if unknown."""
        entry = self._principals.get(principal)
        return entry.name if entry is not None else None

    def evaluate(self, principal: str, call: Call) -> PolicyDecision:
        """Decide ``call`` by ``principal`` (a policy name or a did:key). Never raises for a bad call: denies."""
        entry = self._principals.get(principal)
        resource = call.resource
        if entry is None:
            return PolicyDecision(
                Outcome.DENY, None, resource, reasons=(f"{principal!r} is not a principal of this policy",)
            )
        refusal = self._check_declared(call)
        if refusal is not None:
            return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(refusal,))
        misses: list[str] = []
        for role in entry.roles:
            rules = self._by_role[role].get(resource)
            if rules is None:
                if resource in self._tools or resource in self._models:
                    continue
                rules = tuple(
                    r for r in self._wild_by_role[role] if pattern_matches(r.capability.resource, resource)
                )
            for rule in rules:
                if covers(rule.capability, call):
                    return self._allowed(entry, call, role, rule)
                misses.append(_miss(rule, call))
        if not misses:
            reason = f"no rule of {entry.name}'s roles ({', '.join(entry.roles) or 'none'}) names {resource}"
            return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(reason,))
        return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=tuple(misses))

    def _check_declared(self, call: Call) -> str | None:
        resource = call.resource
        if resource.startswith("model:"):
            return None if resource in self._models else f"{resource} is not declared in the policy's models"
        if not resource.startswith("tool:"):
            return None
        tool = self._tools.get(resource)
        if tool is None:
            return f"{resource} is not declared in the policy's tools"
        declared = tool.args
        for name, value in call.args.items():
            arg = declared.get(name)
            if arg is None:
                return f"{resource} does not declare an argument {name!r}"
            types = _TYPES[arg.type]
            if not isinstance(value, types) or (arg.type != "boolean" and isinstance(value, bool)):
                return f"argument {name!r} must be a {arg.type}, got {type(value).__name__}"
        for name, arg in declared.items():
            if arg.required and name not in call.args:
                return f"required argument {name!r} is missing"
        return None

    def _allowed(self, entry: _Principal, call: Call, role: str, rule: RuleRef) -> PolicyDecision:
        resource = call.resource
        quotas = tuple(q.ref for q in entry.quotas if any(pattern_matches(p, resource) for p in q.patterns))
        budget = self.policy.document.roles[role].budget
        reasons = [f"allowed by {rule}" + (f", held through role {role}" if rule.role != role else "")]
        gates = self._gates.get(resource)
        if gates is None and resource not in self._tools:
            gates = tuple(g for g in self._wild_gates if pattern_matches(g.pattern, resource))
        for gate in gates or ():
            if _gate_applies(gate.requirement.conditions, call.args):
                req = gate.requirement
                reasons.append(
                    f"approval gate {gate.name} applies: {req.quorum} of {', '.join(req.approvers)} must approve"
                    f" within {req.expiry_s}s"
                )
                return PolicyDecision(
                    Outcome.APPROVAL_REQUIRED,
                    entry.name,
                    resource,
                    rule.role,
                    rule,
                    budget,
                    quotas,
                    req,
                    tuple(reasons),
                )
        return PolicyDecision(
            Outcome.ALLOW, entry.name, resource, rule.role, rule, budget, quotas, None, tuple(reasons)
        )


def _gate_applies(conditions: tuple[tuple[str, Constraint], ...], args: Any) -> bool:
    # A call that leaves out an argument the gate looks at needs approval: fail closed.
    return all(name not in args or c.allows(args[name]) for name, c in conditions)


def _miss(rule: RuleRef, call: Call) -> str:
    cap = rule.capability
    if cap.action != "*" and cap.action != call.action:
        return f"{rule} is for action {cap.action}, not {call.action}"
    for name, constraint in cap.constraints:
        if name not in call.args:
            return f"{rule} requires argument {name!r}"
        if not constraint.allows(call.args[name]):
            return f"{rule}: {name}={call.args[name]!r} is outside {constraint}"
    return f"{rule} does not cover the call"  # pragma: no cover - covers() was false for a reason above


def role_grant_template(policy: Policy, role: str) -> GrantTemplate:
    """Exactly what a root grant for ``role`` may contain: its capabilities (inherited ones
    included), its budget, its TTL capped by the policy maximum, and its delegation depth.

    Raises ``PolicyError`` if the policy has no such role.
    """
    spec = policy.document.roles.get(role)
    if spec is None:
        raise PolicyError(
            f"no role {role!r}",
            file=policy.source,
            expected=f"one of: {', '.join(policy.document.roles) or '(none)'}",
            hint="see the roles section of the policy",
        )
    max_ttl = policy.document.settings.max_ttl_s
    ttl = min(spec.ttl_s, max_ttl) if spec.ttl_s is not None else max_ttl
    depth = spec.delegation.max_depth if spec.delegation is not None else 0
    caps = tuple(dict.fromkeys(rule.capability for rule in policy.effective_rules(role)))
    return GrantTemplate(caps, spec.budget, ttl, depth)
