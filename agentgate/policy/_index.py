"""Policy evaluation: an index built once, so a decision looks rules up instead of scanning them.

For every declared tool and model the index holds one slot: the argument signature, the approval
gates that guard it, and per role the rules whose pattern names it (exact rules, and wildcard
rules matched once at build time), compiled to flat tuples. Resources the policy does not
declare (``gpu:``) are matched against each role's exact and wildcard rules. A principal maps to
its roles (inherited ones included) and its quotas. A decision is then a few dict lookups and
the constraint checks of the few rules that name the resource: its cost does not grow with the
number of rules.

Default deny: an unknown principal, an undeclared tool or model, an undeclared or mistyped
argument, or no rule that covers the call is a deny that says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from agentgate._json import INT64, SCALARS, canonical_json
from agentgate._names import did_you_mean, policy_unit
from agentgate._shown import escaped, quoted
from agentgate.capabilities import (
    Call,
    Capability,
    Constraint,
    attenuates,
    canonical_resource,
    pattern_matches,
)
from agentgate.errors import CapabilityError, InputError, PolicyError
from agentgate.findings import Finding, FindingKind, Outcome
from agentgate.policy._load import Policy, RuleRef, describe_constraint
from agentgate.policy._schema import Budget, Delegation

# Exact types: a bool is not an integer here, and a str subclass is not a string.
_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
}

QUOTA_CACHE_SIZE = 4096
"""Most resources a principal's quota cache holds before it is emptied: a rule on ``gpu:*``
allows any GPU type a caller names, so the resources seen are not bounded by the policy."""


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
    """A quota that counts the call: it names the call's resource, and the call costs something
    in its unit (a ``tokens`` or ``usd_micros`` quota never counts a tool call)."""

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
    """The budget of ``held_role``: what a grant for the role the principal holds may spend."""
    quotas: tuple[QuotaRef, ...] = ()
    approval: ApprovalRequirement | None = None
    reasons: tuple[str, ...] = ()
    """Why, in sentences: the rule that allowed it, or each reason it was refused."""
    held_role: str | None = None
    """The role the principal holds that brings the allowing rule: ``role`` itself, or a role
    that inherits it. Its budget is the one that applies (a root grant for it carries that budget)."""

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
    via: dict[str, str]
    """Role (inherited ones included) -> the role the principal holds that brings it."""
    quota_cache: dict[str, tuple[QuotaRef, ...]]
    """Resource -> the quotas that count it, filled on first use (at most ``QUOTA_CACHE_SIZE``
    resources, emptied when full: the quotas are a pure function of the resource)."""


class _Slot(NamedTuple):
    """Everything a decision on one declared resource needs, in one place (one dict lookup)."""

    types: dict[str, frozenset[type]] | None
    """Argument types by name (tools), or ``None`` (models: arguments are not declared)."""
    required: tuple[str, ...]
    rules: dict[str, tuple[_Compiled, ...]]
    """Role -> its rules that name this resource (exact or wildcard), compiled, in declaration order."""
    gates: tuple[_Gate, ...]
    classes: frozenset[str] | None = None
    """The priority classes a model's requests may use, when its declaration lists them."""


class PolicyIndex:
    """Answers ``evaluate(principal, call)`` for one ``Policy``; build once, query many times."""

    def __init__(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise PolicyError(
                f"PolicyIndex takes a Policy (from load_policy or parse_policy), got {type(policy).__name__}"
            )
        self.policy = policy
        doc = policy.document
        self._budgets: dict[str, Budget | None] = {name: role.budget for name, role in doc.roles.items()}
        self._priced_gpus = frozenset(
            f"gpu:{name}" for name, gpu in doc.gpus.items() if gpu.cost_per_gpu_hour > 0
        )
        self._index_gates(policy)
        exact = self._index_rules(policy)
        self._slots = self._build_slots(policy, exact)
        self._exact_other = {
            resource: by_role for resource, by_role in exact.items() if resource not in self._slots
        }
        self._principals = _index_principals(policy)

    def _index_gates(self, policy: Policy) -> None:
        """The approval gates by their pattern: ``_exact_gates``, and ``_wild_gates`` with each
        gate's position in the policy (``_gates_of`` keeps the policy's order)."""
        gates = [
            _Gate(
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
            for name, gate in policy.document.approvals.items()
        ]
        # Gates and rules by their pattern: the wildcard ones that name a resource are found by
        # looking up its few ``wild_ancestors``, never by matching every wildcard of the policy
        # against it (which made building the index cost tools x wildcard rules, and every
        # decision on a ``gpu:`` resource cost the wildcard rules of the caller's roles).
        wild_gates: dict[str, list[tuple[int, _Gate]]] = {}
        exact_gates: dict[str, list[_Gate]] = {}
        for position, g in enumerate(gates):
            if g.pattern.endswith("*"):
                wild_gates.setdefault(g.pattern, []).append((position, g))
            else:
                exact_gates.setdefault(g.pattern, []).append(g)
        self._wild_gates = {pattern: tuple(found) for pattern, found in wild_gates.items()}
        self._exact_gates = {pattern: tuple(found) for pattern, found in exact_gates.items()}

    def _index_rules(self, policy: Policy) -> dict[str, dict[str, list[RuleRef]]]:
        """Set ``_wild_rules`` (the wildcard rules by pattern, per role); return the exact ones
        by resource, per role."""
        exact: dict[str, dict[str, list[RuleRef]]] = {}
        wild_rules: dict[str, dict[str, list[RuleRef]]] = {}
        for role in policy.document.roles:
            for rule in policy.rules.get(role, ()):
                pattern = rule.capability.resource
                into = wild_rules if pattern.endswith("*") else exact
                into.setdefault(pattern, {}).setdefault(role, []).append(rule)
        self._wild_rules: dict[str, dict[str, tuple[RuleRef, ...]]] = {
            pattern: {role: tuple(rs) for role, rs in by_role.items()}
            for pattern, by_role in wild_rules.items()
        }
        return exact

    def _build_slots(self, policy: Policy, exact: dict[str, dict[str, list[RuleRef]]]) -> dict[str, _Slot]:
        """One slot per declared tool and model: its signature, its gates, its rules per role
        (exact and wildcard, compiled, in policy order) and, for a model, its priority classes."""
        doc = policy.document
        slots: dict[str, _Slot] = {}
        declared: list[tuple[str, dict[str, frozenset[type]] | None, tuple[str, ...]]] = [
            (
                f"tool:{name}",
                {arg: _TYPES[spec.type] for arg, spec in tool.args.items()},
                tuple(arg for arg, spec in tool.args.items() if spec.required),
            )
            for name, tool in doc.tools.items()
        ] + [(f"model:{name}", None, ()) for name in doc.models]
        # Tools with the same declared arguments share one signature (interned, for locality).
        signatures: dict[tuple[Any, ...], tuple[dict[str, frozenset[type]] | None, tuple[str, ...]]] = {}
        for resource, types, required in declared:
            key = (
                tuple(sorted(types.items(), key=lambda kv: kv[0])) if types is not None else None,
                required,
            )
            types, required = signatures.setdefault(key, (types, required))
            named: dict[str, list[RuleRef]] = {role: list(rs) for role, rs in exact.get(resource, {}).items()}
            for ancestor in wild_ancestors(resource):
                for role, matched in self._wild_rules.get(ancestor, {}).items():
                    named.setdefault(role, []).extend(matched)
            rules = {
                role: tuple(_compile(r) for r in sorted(rs, key=lambda r: r.index))
                for role, rs in named.items()
            }
            slot_gates = self._gates_of(resource)
            model = doc.models.get(resource.removeprefix("model:")) if types is None else None
            classes = frozenset(model.priority_classes) if model and model.priority_classes else None
            slots[resource] = _Slot(types, required, rules, slot_gates, classes)
        return slots

    def principal_name(self, principal: str) -> str | None:
        """The policy name of a principal given by name or did:key, or ``None`` if unknown."""
        entry = self._principals.get(principal)
        return entry.name if entry is not None else None

    def _held_roles(self, did: str) -> tuple[str, ...]:
        """The roles the principal ``did`` holds itself (not those they inherit); none for a key
        the policy does not name. The terms of a grant (``budget``, ``ttl_s``, ``delegation``)
        are read from these: ``inherits`` brings another role's rules only, and a call allowed by
        an inherited rule is decided as the held role that brings it (``held_role``)."""
        name = self.principal_name(did)
        principal = self.policy.document.principals.get(name) if name else None
        return tuple(principal.roles) if principal else ()

    def _bounding_roles(self, did: str) -> tuple[str, ...]:
        """The held roles (``_held_roles``) whose terms bound a root grant to ``did`` and what it
        may hand on (``delegation_fault``, ``delegation_budget_unit``): those that hold a rule,
        themselves or through ``inherits``. A role that holds none allows no call,
        so no decision is ever made as it; until review R96 its ``ttl_s``, its budget (none) and
        its ``delegation.max_depth`` still lifted the bounds of every grant to its holder: a
        description-only role next to one of 600 s and 3 calls let a grant live 86,400 s with
        no budget, and one with ``max_depth: 5`` let a chain run five links deep (and, until the
        R96 regression review, its ``delegation`` rule's lifetime and budget still held)."""
        return tuple(role for role in self._held_roles(did) if role in self.policy.ruling_roles)

    def root_ttl_s(self, holder: str) -> int:
        """The longest a root grant to ``holder`` (a did:key) may live: the longest ``ttl_s`` of
        the roles it holds that hold a rule (``_bounding_roles``), each capped by
        ``settings.max_ttl_s`` (``role_grant_template``); ``settings.max_ttl_s`` for a key the
        policy does not name or that holds no such role (the policy's verdict refuses its calls)."""
        roles = self._bounding_roles(holder)
        if not roles:
            return self.policy.document.settings.max_ttl_s
        return max(role_grant_template(self.policy, role).ttl_s for role in roles)

    def root_budgets(self, holder: str) -> tuple[Budget, ...] | None:
        """The budgets a root grant to ``holder`` (a did:key) may carry: the ``budget`` of each role
        it holds that holds a rule (``_bounding_roles``, ``role_grant_template``); the grant must
        carry one in the unit of one of them, no larger than its ``limit``. ``None`` (no bound)
        when one of those roles has no budget, and for a key the policy does not name or that
        holds no such role (the policy's verdict refuses its calls)."""
        budgets: list[Budget] = []
        for role in self._bounding_roles(holder):
            budget = self._budgets[role]
            if budget is None:
                return None
            budgets.append(budget)
        return tuple(budgets) or None

    def roles_of(self, holder: str) -> tuple[str, ...]:
        """The roles the principal ``holder`` (a did:key or a policy name) holds, itself or through
        a role it inherits, as ``evaluate`` reads its rules; none for one the policy does not name."""
        entry = self._principals.get(holder)
        return entry.roles if entry is not None else ()

    def holds_role(self, holder: str, role: str) -> bool:
        """Whether ``role`` is one of ``roles_of(holder)``: a root grant for it to ``holder`` is
        one the policy's decisions can allow (``Gate.issue`` refuses any other)."""
        return role in self.roles_of(holder)

    def role_refusal(self, holder: str, role: str) -> str | None:
        """Why a root grant for ``role`` to ``holder`` (a did:key) would have every call refused:
        ``holder`` is not a principal of the policy, or does not hold ``role``; ``None`` where it
        holds it (``Gate.issue`` and ``agentgate grant issue --policy --role`` refuse such a grant)."""
        if self.holds_role(holder, role):
            return None
        principal = self.principal_name(holder)
        if principal is None:
            return (
                f"{holder} is not a principal of this policy: it may hold no role, so a grant for "
                f"role {role} to it would have every call refused; add it under principals"
            )
        return (
            f"principal {principal} does not hold role {role} (its roles: "
            f"{', '.join(self.roles_of(holder)) or 'none'}): a grant for that role to it "
            "would have every call refused; issue one for a role it holds"
        )

    def delegation_depth(self, holder: str) -> int:
        """How many delegation steps may follow a root grant to ``holder`` (a did:key): the
        deepest ``delegation.max_depth`` of the roles it holds that hold a rule
        (``_bounding_roles``, ``role_grant_template``), 0 for a key the policy does not name or
        whose roles delegate nothing."""
        return max(
            (role_grant_template(self.policy, role).max_depth for role in self._bounding_roles(holder)),
            default=0,
        )

    def _delegation_rules(self, roles: Iterable[str], cap: Capability) -> list[Delegation]:
        """The ``delegation`` rules of ``roles`` (those with one) that let ``cap`` be handed on."""
        return [
            delegation
            for r in roles
            if (delegation := self.policy.document.roles[r].delegation) is not None
            and any(attenuates(rule.capability, cap) for rule in self.policy.delegable.get(r, ()))
        ]

    def delegation_budget_unit(
        self, delegator: str, capabilities: Iterable[Capability], seconds: int, budget: int | None
    ) -> str | None:
        """The unit in which a grant of ``capabilities`` that ``delegator`` (a did:key) hands on,
        living ``seconds`` and carrying ``budget``, is bounded by the ``delegation`` rules of its
        roles: the unit of the first rule with a ``budget``, in the order the policy declares its
        roles, under which the grant is one ``delegation_fault`` lets it make (each capability
        handed on by a rule that lasts ``seconds`` and admits ``budget`` in that unit); where no
        unit admits it, the first rule's (``delegation_fault`` then refuses it, naming the limit);
        ``None`` where no rule that hands one of ``capabilities`` on has a budget.
        ``Gate.delegate`` gives a sub-agent's budget this unit when its parent's grant carries
        none. Until review R85b it was the unit of the first rule with a budget in the order the
        principal lists its roles, admitting or not: a parent holding ``[a, b]``, whose rules allow
        10 ``calls`` and 1000 ``usd_micros``, was refused a budget of 500 that a chain made outside
        the Gate carried in ``usd_micros`` and was allowed at every call."""
        held = set(self._bounding_roles(delegator))
        roles = [r for r, role in self.policy.document.roles.items() if r in held and role.delegation]
        per_cap = [self._delegation_rules(roles, cap) for cap in capabilities]
        handing = {id(rule) for rules in per_cap for rule in rules}
        units = dict.fromkeys(
            rule.budget.unit
            for r in roles
            if (rule := self.policy.document.roles[r].delegation) is not None
            and rule.budget is not None
            and id(rule) in handing
        )
        for unit in units:
            if all(any(_admits(rule, seconds, budget, unit) for rule in rules) for rules in per_cap):
                return unit
        return next(iter(units), None)

    def delegation_fault(
        self,
        delegator: str,
        first_holder: str,
        capabilities: Iterable[Capability],
        seconds: int,
        budget: int | None,
        who: str,
        *,
        asked_s: int | None = None,
        unit: str | None = None,
    ) -> Finding | None:
        """Why the ``delegation`` rules of the roles of ``delegator`` (a did:key) do not let it hand
        on a grant of ``capabilities`` that lives ``seconds`` and carries ``budget`` (``None``:
        the delegator's whole budget) in ``unit`` (``None``: the rule's own); ``None`` when they
        let it. ``first_holder``: the audience of the chain's root grant; ``who``: the delegator
        as the message names it. ``asked_s``: the TTL asked, when ``seconds`` is less, capped to
        the delegator's remaining life (``Gate.delegate``): a refusal for the TTL names both
        (until review R67 it named the capped TTL as the one asked). A budget in another unit than
        a rule's is over it, and its refusal names both units: until review R85 the amounts alone
        were compared, so 5 ``usd_micros`` passed a rule of 10 ``calls`` and the sub-agent's tool
        calls ran without limit. A grant carries one budget in one unit, so capabilities that
        only rules in units sharing none hand on are refused together, naming those units (until
        review R85b the refusal named one rule's unit, which the other capability's refused).

        The finding is ``scope_creep`` (``delegation_not_in_policy``,
        ``delegation_wider_than_policy``, ``delegation_budget_above_policy``), or
        ``non_revocable_grant`` (``delegation_ttl_above_policy``) for a grant that lives too long.
        A delegator the policy does not name, in a chain first issued to a principal it names, is
        a key made at run time: its grant's own depth and attenuation bound it (``None``). Both
        ``Gate.delegate`` (a new grant) and the Gate's decisions (each link of a chain presented)
        ask this, so that a chain made outside the Gate is held to the same rules."""
        unit = None if unit is None else policy_unit(unit)
        roles = [r for r in self._bounding_roles(delegator) if self.policy.document.roles[r].delegation]

        def refuse(code: str, message: str, kind: FindingKind = FindingKind.SCOPE_CREEP) -> Finding:
            return Finding(kind=kind, code=code, message=message)

        if not roles:
            named = self.principal_name(delegator) is not None
            if not named and self.principal_name(first_holder) is not None:
                return None  # a key made at run time: its grant's own depth and attenuation bound it
            if not named:  # nor is the chain's first holder: removed, or its key replaced
                return refuse(
                    "delegation_not_in_policy",
                    f"{who}'s chain was issued to {first_holder}, which is not a principal of this "
                    "policy: delegate from a grant issued to a principal the policy names",
                )
            return refuse(
                "delegation_not_in_policy",
                f"the roles of {who} may not delegate at all: give one of its roles a delegation "
                "section in the policy, or issue the sub-agent a grant of its own with Gate.issue",
            )
        # Each capability is bounded by the rule of a role that may hand it on: one such role
        # must admit the grant's whole lifetime and budget (another role's looser limits, for
        # capabilities it hands on, do not widen this one's).
        bounded: list[tuple[Capability, list[Delegation]]] = []
        for cap in capabilities:
            rules = self._delegation_rules(roles, cap)
            if not rules:
                handed = dict.fromkeys(
                    str(rule.capability) for r in roles for rule in self.policy.delegable.get(r, ())
                )
                return refuse(
                    "delegation_wider_than_policy",
                    f"the policy does not let {who} hand on {cap}: delegate only what the policy lets "
                    f"{who} hand on: {', '.join(handed) or 'nothing'}, or narrower",
                )
            lasting = [d for d in rules if d.max_ttl_s is None or seconds <= d.max_ttl_s]
            if not lasting:
                longest = max(d.max_ttl_s or 0 for d in rules)
                # Too long-lived, as a child outliving its parent and the linter's
                # ttl_above_policy_max: authority that cannot be taken back in time.
                capped = f"{asked_s}s (its parent's grant has {seconds}s left)"
                return refuse(
                    "delegation_ttl_above_policy",
                    f"a delegated grant with {cap} may live {longest}s at most, not "
                    f"{capped if asked_s is not None and asked_s > seconds else f'{seconds}s'}: "
                    f"delegate it with a ttl of at most {longest}s",
                    FindingKind.NON_REVOCABLE_GRANT,
                )
            bounded.append((cap, lasting))
        # A grant carries one budget, in one unit: capabilities whose rules bound it in units
        # that share none cannot be handed on together (each one's check below would name only
        # its own rule's unit, which the other's refuses).
        # (Not where no budget is given: the parent's whole budget is what each rule refuses,
        # and the check below says so; "separate grants" would each be refused for it.)
        common: set[str] | None = None
        together: list[str] = []
        for cap, lasting in bounded if budget is not None else ():
            if any(d.budget is None for d in lasting):
                continue
            units: set[str] = {d.budget.unit for d in lasting if d.budget is not None}
            if common is not None and not common & units:
                return refuse(
                    "delegation_budget_above_policy",
                    f"the policy bounds the budget of a delegated grant with {', '.join(together)} "
                    f"in {' or '.join(sorted(common))} and of one with {cap} in "
                    f"{' or '.join(sorted(units))}, and a grant carries one budget, in one unit: "
                    "delegate them in separate grants",
                )
            common = units if common is None else common & units
            together.append(str(cap))
        for cap, lasting in bounded:
            if not any(_admits(d, seconds, budget, unit) for d in lasting):
                bounds = [d.budget for d in lasting if d.budget]
                alike = [b for b in bounds if unit in (None, b.unit)]
                largest = max(alike or bounds, key=lambda b: b.limit)
                if budget is not None and not alike:
                    return refuse(
                        "delegation_budget_above_policy",
                        f"a delegated grant with {cap} may carry a budget of {largest.limit} "
                        f"{largest.unit} at most, not {budget} {unit}, another unit: delegate it with a "
                        f"budget of at most {largest.limit} {largest.unit} (a delegated grant keeps its "
                        f"parent's unit: from a grant with no budget or one in {largest.unit})",
                    )
                asked = "the parent's whole budget" if budget is None else str(budget)
                return refuse(
                    "delegation_budget_above_policy",
                    f"a delegated grant with {cap} may carry a budget of {largest.limit} at most, not "
                    f"{asked}: delegate it with a budget of at most {largest.limit} {largest.unit}",
                )
        return None

    def evaluate(self, principal: str, call: Call, *, delegators: Collection[str] = ()) -> PolicyDecision:
        """Decide ``call`` by ``principal`` (a policy name or a did:key). Never raises for a bad call: denies.

        ``delegators``: the did:keys the caller's grant was delegated by (the holders above it in
        its chain). An approval gate leaves them out of its approvers as it leaves out the
        requester, who never approves its own call: a delegator drives its sub-agent's call.
        Until review R68 only the principal judged was left out, and an approver that delegated
        to a sub-agent the policy names approved that sub-agent's call.

        Raises ``CapabilityError`` for a ``call`` that is not a ``Call`` at all (a dict, a string).
        """
        if not isinstance(call, Call):
            raise CapabilityError(f"evaluate takes a Call, got {type(call).__name__}")
        # A principal that is not a string (a list: unhashable) is no principal of this policy.
        entry = self._principals.get(principal) if isinstance(principal, str) else None
        resource = call.resource
        if entry is None:
            return PolicyDecision(
                Outcome.DENY,
                None,
                resource,
                reasons=(f"{named_principal(principal)} is not a principal of this policy",),
            )
        slot = self._slots.get(resource)
        if slot is None:
            return self._evaluate_undeclared(entry, call, delegators)
        refusal = _check_arguments(slot, call) if slot.types is not None else _undigestable(call.args)
        if refusal is not None:
            return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(refusal,))
        if slot.types is None and slot.classes is not None and "priority" in call.args:
            priority = call.args["priority"]
            if type(priority) is not str or priority not in slot.classes:
                reason = (
                    f"{resource} takes the priority classes {', '.join(sorted(slot.classes))},"
                    f" not {_shown(priority)}"
                )
                return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(reason,))
        misses: list[str] = []
        for role in entry.roles:
            for compiled in slot.rules.get(role, ()):
                action = compiled[1]
                if (action == "*" or action == call.action) and _passes(compiled, call.args):
                    return self._allowed(entry, call, compiled[0], slot.gates, compiled[2], role, delegators)
                misses.append(_miss(compiled[0], call))
        return self._denied(entry, resource, misses)

    def allowed_through(self, principal: str, call: Call) -> tuple[tuple[str, RuleRef], ...]:
        """Every role ``principal`` holds itself through which a rule allows ``call``: for each,
        in the order the principal's entry lists them, ``(held role, rule)``, the rule being the
        first of that role or of a role it inherits (read in the order ``evaluate`` reads them)
        whose action and constraints hold. The first pair is the one ``evaluate`` decides by
        (``held_role``, ``rule``); the others name roles whose grants could carry the call too,
        each on its own budget. Empty where ``evaluate`` allows through no rule (a deny before or
        after reading the rules); approval gates apply whatever the role, so they are not read."""
        decision = self.evaluate(principal, call)
        if decision.rule is None or decision.principal is None:
            return ()
        resource = call.resource
        slot = self._slots.get(resource)
        found: list[tuple[str, RuleRef]] = []
        for held in dict.fromkeys(self.policy.document.principals[decision.principal].roles):
            for role in self.policy.role_closure(held):
                rule = self._first_allowing(slot, role, call)
                if rule is not None:
                    found.append((held, rule))
                    break
        return tuple(found)

    def _first_allowing(self, slot: _Slot | None, role: str, call: Call) -> RuleRef | None:
        """The first rule of ``role`` itself that allows ``call`` (``slot``: the call's resource's,
        ``None`` for an undeclared one, as ``evaluate`` reads them), or ``None``."""
        if slot is not None:
            for compiled in slot.rules.get(role, ()):
                if compiled[1] in ("*", call.action) and _passes(compiled, call.args):
                    rule: RuleRef = compiled[0]
                    return rule
            return None
        resource = call.resource
        rules = [*self._exact_other.get(resource, {}).get(role, ())]
        for pattern in wild_ancestors(resource):
            rules += self._wild_rules.get(pattern, {}).get(role, ())
        return next((r for r in sorted(rules, key=lambda r: r.index) if _satisfies(r.capability, call)), None)

    def _evaluate_undeclared(
        self, entry: _Principal, call: Call, delegators: Collection[str] = ()
    ) -> PolicyDecision:
        """Tools and models must be declared; other resources (``gpu:``) are matched by their rules.

        Their names must be canonical: a wildcard rule (``gpu:*``) would otherwise allow
        ``gpu:H100`` or ``gpu: h100``, which the gates and prices on ``gpu:h100`` do not name.
        """
        resource = call.resource
        kind = resource.partition(":")[0]
        if kind in ("tool", "model"):
            reason = f"{resource} is not declared in the policy's {kind}s"
            return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(reason,))
        try:
            canonical_resource(resource)
        except CapabilityError as exc:
            return PolicyDecision(
                Outcome.DENY, entry.name, resource, reasons=(f"{exc}; refused, never normalized",)
            )
        refusal = _undigestable(call.args)
        if refusal is not None:
            return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(refusal,))
        misses: list[str] = []
        by_role = self._exact_other.get(resource, {})
        wild = [self._wild_rules[p] for p in wild_ancestors(resource) if p in self._wild_rules]
        for role in entry.roles:
            rules = [*by_role.get(role, ())]
            for by_pattern in wild:
                rules += by_pattern.get(role, ())
            for rule in sorted(rules, key=lambda r: r.index):
                if _satisfies(rule.capability, call):
                    # The gates on this very resource (``gpu:h100``) and the wildcard ones that match it.
                    gates = self._gates_of(resource)
                    return self._allowed(entry, call, rule, gates, rule.allowed_by, role, delegators)
                misses.append(_miss(rule, call))
        return self._denied(entry, resource, misses)

    def _gates_of(self, resource: str) -> tuple[_Gate, ...]:
        """The gates on ``resource`` itself, then the wildcard ones that name it, in the order
        the policy declares them."""
        wild = sorted(
            (found for p in wild_ancestors(resource) for found in self._wild_gates.get(p, ())),
            key=lambda found: found[0],
        )
        return self._exact_gates.get(resource, ()) + tuple(g for _position, g in wild)

    def approval_gates(self, resource: str) -> tuple[ApprovalRequirement, ...]:
        """Every approval gate that names ``resource`` (``_gates_of``, as ``evaluate`` finds them),
        whatever its conditions: the approvers of the gate a call on it needs are among theirs,
        less the requester and its delegators (``Gate.approve`` refuses a key that is none)."""
        return tuple(gate.requirement for gate in self._gates_of(resource))

    def _denied(self, entry: _Principal, resource: str, misses: list[str]) -> PolicyDecision:
        if not misses:
            misses = [
                f"no rule of {entry.name}'s roles ({', '.join(entry.roles) or 'none'}) names {resource}"
            ]
        return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=tuple(misses))

    def _allowed(
        self,
        entry: _Principal,
        call: Call,
        rule: RuleRef,
        gates: tuple[_Gate, ...],
        allowed_by: str,
        role: str,
        delegators: Collection[str] = (),
    ) -> PolicyDecision:
        resource = call.resource
        quotas: tuple[QuotaRef, ...] = ()
        if entry.quotas:
            cached = entry.quota_cache.get(resource)
            if cached is None:
                cached = tuple(
                    q.ref
                    for q in entry.quotas
                    if any(pattern_matches(p, resource) for p in q.patterns)
                    and _counts_in(q.ref.unit, resource, self._priced_gpus)
                )
                if len(entry.quota_cache) >= QUOTA_CACHE_SIZE:
                    entry.quota_cache.clear()
                entry.quota_cache[resource] = cached
            quotas = cached
        held = entry.via[role]
        budget = self._budgets[held]
        applying = [gate for gate in gates if _gate_applies(gate.requirement.conditions, call.args)]
        if applying:
            req, refusal = _combined_requirement(
                applying, entry.name, self.policy.principal_dids.get(entry.name), delegators
            )
            if req is None:
                return PolicyDecision(Outcome.DENY, entry.name, resource, reasons=(allowed_by, refusal))
            return PolicyDecision(
                Outcome.APPROVAL_REQUIRED,
                entry.name,
                resource,
                rule.role,
                rule,
                budget,
                quotas,
                req,
                (allowed_by, gate_reason(req)),
                held,
            )
        return PolicyDecision(
            Outcome.ALLOW, entry.name, resource, rule.role, rule, budget, quotas, None, (allowed_by,), held
        )


def named_principal(principal: object) -> str:
    """``principal`` as a decision names one it does not know: quoted, and one that is not text
    (from a Python caller) with its type, so that ``123`` or ``None`` never reads as the
    principal ``"123"`` or ``"None"`` of the policy (a regression review of R93)."""
    if isinstance(principal, str):
        return quoted(principal)
    return f"{quoted(principal)} (of type {type(principal).__name__}, not text)"


def gate_reason(req: ApprovalRequirement) -> str:
    """The reason a call that needs ``req`` is asked for approval, which its ``approval_required``
    audit entry records: the gate, the quorum, the approvers and the expiry. The expiry is the
    gate's ``expiry_s``: the request's own deadline (``expires_at``) is no later than the grant
    chain's expiry (review R96), which the policy does not know; the text is parsed back
    (``_GATE_REASON``, ``agentgate approval``), so it stays the policy's."""
    approvers = ", ".join(req.approvers)
    return (
        f"approval gate {req.gate} applies: {req.quorum} of {approvers} must approve within {req.expiry_s}s"
    )


_GATE_REASON = re.compile(r"approval gate (\S+) applies: [0-9]+ of (\S.*) must approve within [0-9]+s")


def gate_named(reason: str) -> tuple[str, list[str]] | None:
    """The gate and the approvers a ``gate_reason`` names, or ``None`` for any other reason.
    Unambiguous: a gate's and an approver's names hold no space or comma (``schema.Name``), and
    a combined gate's name joins its gates' with ``+``."""
    found = _GATE_REASON.fullmatch(reason)
    return None if found is None else (found[1], found[2].split(", "))


def _admits(rule: Delegation, seconds: int, budget: int | None, unit: str | None) -> bool:
    """Whether the ``delegation`` rule ``rule`` lets a grant it hands on live ``seconds`` and
    carry ``budget`` (``None``: its delegator's whole budget, which only a rule with no budget
    admits) in ``unit`` (``None``: the rule's own)."""
    if rule.max_ttl_s is not None and seconds > rule.max_ttl_s:
        return False
    return rule.budget is None or (
        budget is not None and unit in (None, rule.budget.unit) and budget <= rule.budget.limit
    )


def _counts_in(unit: str, resource: str, priced_gpus: frozenset[str]) -> bool:
    """Whether a call on ``resource`` costs something in ``unit`` (what the Gate charges): one
    call always; tokens and money for a model; money for a GPU type the policy prices above 0;
    nothing else (a tool call costs one call; lint's ``quota_counts_nothing`` reads units alike). A quota in a unit the call does not use counts nothing
    for it, so a decision does not name it."""
    if unit == "calls" or resource.startswith("model:"):
        return True
    return unit == "usd_micros" and resource in priced_gpus


def _index_principals(policy: Policy) -> dict[str, _Principal]:
    """Each principal, by name and by did:key: its roles (inherited ones included, each with the
    role it holds that brings it) and its quotas."""
    principals: dict[str, _Principal] = {}
    doc = policy.document
    # Each quota once, and by its subject: a principal's quotas are those of its tenant, its
    # name and its roles, found by lookup (not by reading every quota for every principal).
    quotas_in_order = [
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
    ]
    by_subject: dict[tuple[str, str], list[int]] = {}
    for position, q in enumerate(doc.quotas.values()):
        for subject, value in (("tenant", q.tenant), ("principal", q.principal), ("role", q.role)):
            if value is not None:
                by_subject.setdefault((subject, value), []).append(position)
    closures: dict[str, tuple[str, ...]] = {}  # held role -> its closure, computed once
    for name, spec in doc.principals.items():
        held_closures = []
        for held in spec.roles:
            if held not in closures:
                closures[held] = policy.role_closure(held)
            held_closures.append(closures[held])
        roles = tuple(dict.fromkeys(role for closure in held_closures for role in closure))
        subjects = [("principal", name), *(("role", role) for role in roles)]
        if spec.tenant is not None:
            subjects.append(("tenant", spec.tenant))
        positions = sorted({i for subject in subjects for i in by_subject.get(subject, ())})
        quotas = tuple(quotas_in_order[i] for i in positions)
        via: dict[str, str] = {}
        for held, closure in zip(spec.roles, held_closures, strict=True):
            for role in closure:
                via.setdefault(role, held)
        entry = _Principal(name, roles, quotas, via, {})
        principals[name] = entry
        did = policy.principal_dids.get(name)
        if did is not None:
            principals.setdefault(did, entry)
    return principals


def wild_ancestors(resource: str) -> list[str]:
    """The wildcard patterns that name the resource ``resource`` (as ``pattern_matches``), or,
    for a pattern ``resource``, that hold it (as ``pattern_within``, itself included): ``kind:*``
    and ``stem.*`` for each stem of it that ends at a ``:`` or ``.``, broadest first.

    Every wildcard a policy can hold is of one of these two forms (``Capability``), so the
    wildcard rules, gates or quotas that name a resource are found by looking these few patterns
    up in a dict keyed by pattern, instead of by matching each wildcard of the policy in turn.
    """
    wild = resource.endswith((":*", ".*"))
    stem = resource[:-1] if wild else resource
    end = len(stem) if wild else len(stem) - 1
    return [stem[: i + 1] + "*" for i, c in enumerate(stem) if (c == ":" or c == ".") and i < end]


def _combined_requirement(
    applying: list[_Gate], requester: str, requester_did: str | None, delegators: Collection[str] = ()
) -> tuple[ApprovalRequirement, str] | tuple[None, str]:
    """One requirement that an approval meets only if it meets EVERY gate in ``applying``, or
    ``None`` and the reason no approval can.

    The requester never approves their own call, so they leave every approver list, and so do
    the approvers whose key is one of ``delegators`` (the holders the caller's grant was delegated
    by, who drive its call). With one gate that is all. With several, an approval must satisfy
    each of them, so the approvers are those named by every gate, the quorum the largest, the
    expiry the shortest; when fewer such approvers remain than the quorum, no approval could be
    valid and the call is denied.
    """
    out = {requester}
    if delegators:
        above = set(delegators)
        out |= {
            a
            for gate in applying
            for a, did in zip(gate.requirement.approvers, gate.requirement.approver_dids, strict=True)
            if did in above
        }
    who = (
        f"the requester {requester}"
        if len(out) == 1
        else f"the requester {requester} and those its grant was delegated by ({', '.join(sorted(out - {requester}))})"
    )
    for gate in applying:
        req = gate.requirement
        remain = len(set(req.approvers) - out)
        if remain < req.quorum:
            return None, (
                f"approval gate {gate.name} applies, and without {who} only "
                f"{remain} approver(s) remain for a quorum of {req.quorum}: no approval can be valid"
            )
    first = applying[0].requirement
    named = set(first.approvers)
    for gate in applying[1:]:
        named &= set(gate.requirement.approvers)
    named -= out
    # Each approver once, at its first place in the list: looked up in a set, not in the list
    # before it (until review R88 a gate naming 40,000 approvers took seconds a decision).
    keep: list[int] = []
    for i, a in enumerate(first.approvers):
        if a in named:
            keep.append(i)
            named.discard(a)
    if len(applying) == 1 and len(keep) == len(first.approvers):
        return _signable(first, requester_did)
    quorum = max(gate.requirement.quorum for gate in applying)
    names = " and ".join(gate.name for gate in applying)
    if len(keep) < quorum:
        return None, (
            f"approval gates {names} all apply, and only {len(keep)} approver(s) other than the requester "
            f"are named by every one of them, for a quorum of {quorum}: no approval can satisfy them all"
        )
    combined = ApprovalRequirement(
        "+".join(gate.name for gate in applying),
        tuple(first.approvers[i] for i in keep),
        tuple(first.approver_dids[i] for i in keep),
        quorum,
        min(gate.requirement.expiry_s for gate in applying),
        tuple(c for gate in applying for c in gate.requirement.conditions),
        first.line,
    )
    return _signable(combined, requester_did)


def _signable(
    req: ApprovalRequirement, requester_did: str | None
) -> tuple[ApprovalRequirement, str] | tuple[None, str]:
    """``req``, or ``None`` and the reason no approval can meet it. An approval is a signature, so
    only an approver with a key of its own can give one, approvers that share a key are one
    signer, and the requester's key never counts. Until review R53 a gate whose quorum only
    keyless approvers could complete asked for an approval that could never count, and its calls
    waited for ever (``approval_required`` each time) instead of being refused."""
    signers = {did for did in req.approver_dids if did is not None} - {requester_did}
    if len(signers) >= req.quorum:
        return req, ""
    keyless = list(
        dict.fromkeys(a for a, did in zip(req.approvers, req.approver_dids, strict=True) if did is None)
    )
    why = (
        f"{', '.join(keyless)} {'has' if len(keyless) == 1 else 'have'} no key"
        if keyless
        else "some share a key, or the requester's"
    )
    return None, (
        f"approval gate {req.gate} applies, and its approvers other than the requester hold only "
        f"{len(signers)} distinct key(s) for a quorum of {req.quorum} ({why}): no approval can be valid"
    )


_INT_RANGE = 2**63
"""A declared integer or number argument that is an integer lies within ``-(2**63) < v < 2**63``,
the range of a constraint's integers (``capabilities._values``) and of LangGraph's checkpointers."""

_TYPE_NAMES = {frozenset({str}): "string", frozenset({int}): "integer", frozenset({int, float}): "number"}


def undeclared_name(name: object) -> str:
    """How a deny reason names an argument the tool does not declare: the name is the caller's,
    of any type and size (10**5000, 1 MB of text), so ``quoted`` (80 characters at most, a huge
    integer by its size). The Gate's ``redact_reasons`` hides it by this same text: until review
    R86d's review it looked for the whole ``repr``, and a long name (a secret) stayed in the log."""
    return quoted(name)


def _check_arguments(slot: _Slot, call: Call) -> str | None:
    """Why the call's arguments do not fit the tool's declaration, or ``None`` when they do."""
    types = slot.types
    assert types is not None
    args = call.args
    for name, value in args.items():
        accepted = types.get(name)
        if accepted is None:
            return f"{call.resource} does not declare an argument {undeclared_name(name)}"
        if type(value) not in accepted:
            expected = _TYPE_NAMES.get(accepted, "boolean")
            article = "an" if expected == "integer" else "a"
            return f"argument {name!r} must be {article} {expected}, got {type(value).__name__}"
        kind = type(value)
        if kind is int and not -_INT_RANGE < value < _INT_RANGE:
            # As a constraint's integers: until review R58 a declared integer of any size was
            # allowed where no constraint bounded it (the LangGraph middleware refused it).
            return f"argument {name!r} is an integer of {value.bit_length()} bits, beyond the range -2**63 < v < 2**63"
        if kind is float and not math.isfinite(value):
            # JSON has no NaN or infinity, and the Gate denies such a call (args_not_canonical):
            # until review R86 the index allowed it where no constraint bounded the argument.
            return f"argument {name!r} is {value!r}, not a finite number: JSON carries no NaN or infinity"
        if kind is str and not value.isascii():
            try:
                # The encoding the Gate's digest writes it in: no dearer than the digest itself, and
                # no more memory than the text (UTF-32 was faster on 100,000 characters but twice
                # as slow and twice the memory on 10 million; a search for [\ud800-\udfff] slower
                # than either; review R86d).
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                # The Gate cannot digest it either (args_not_canonical): until review R86c the
                # index allowed it.
                return (
                    f"argument {name!r} is not valid Unicode text (a lone surrogate at position "
                    f"{exc.start}): JSON carries none"
                )
    for name in slot.required:
        if name not in args:
            return f"required argument {name!r} is missing"
    return None


def _undigestable(args: Mapping[str, Any]) -> str | None:
    """Why the Gate cannot digest a model's or an undeclared resource's call arguments, which the
    policy does not declare (``args_not_canonical``), or ``None`` when it can: the refusal of
    ``canonical_json``, by which ``args_digest`` writes them (the Gate's own rule), of a NaN or an
    infinity anywhere in them (in a list, in an object), an object key that is not text, text
    that is not valid Unicode (a lone surrogate, in a name or a value), an integer of more digits
    than Python writes (4,300), a value JSON has no form for, or nesting past 254 levels. Until
    review R86b the index allowed such a call (``model:m`` with a ``temperature`` of NaN,
    ``gpu:h100`` with ``hours`` of infinity) that the Gate denies, and ``policy explain`` said
    allow; until review R86c it read them by ``check_json`` alone, which passes a lone surrogate,
    a name that is not text at the top and an integer too long to write.

    The arguments are encoded only where a name is not ASCII text or a value is other than ASCII
    text, an integer within 64 bits, a boolean, null or a finite number, which the Gate always
    digests; otherwise each name and value is looked at once. (A declared tool's arguments are of
    the declared scalar types: ``_check_arguments``.)"""
    for name, value in args.items():
        if type(name) is not str or not name.isascii():
            break
        kind = type(value)
        if kind not in SCALARS:
            if kind is not float or not math.isfinite(value):
                break
        elif kind is str:
            if not value.isascii():
                break
        elif kind is int and not -INT64 <= value < INT64:
            break
    else:
        return None
    try:
        canonical_json(args)
    except InputError as exc:
        return (
            f"call arguments cannot be digested: {escaped(str(exc))}; the Gate denies such a call "
            "(args_not_canonical)"
        )
    return None


# A rule compiled for the index is one flat tuple: (rule, action, "allowed by ..." reason, then six
# entries per constrained argument: argument, lower, upper, lower inclusive, upper inclusive,
# general). Pure numeric bounds are compared inline; any other
# constraint goes through ``general.allows``. The point is locality: a decision reads a few flat
# tuples instead of a graph of objects, which keeps a 1,000-rule policy about as fast as a
# 10-rule one (benchmarks/policy.py).
_Compiled = tuple[Any, ...]
_FIRST_CHECK = 3


def _compile(rule: RuleRef) -> _Compiled:
    checks: list[Any] = []
    for name, c in rule.capability.constraints:
        if c.eq is None and c.one_of is None and c.prefix is None and not c.is_empty:
            # Bounds keep their own type: an integer bound compares exactly beyond 2**53.
            lo, lo_incl = (c.ge, True) if c.ge is not None else (-math.inf, False)
            if c.gt is not None and (c.ge is None or c.gt >= c.ge):
                lo, lo_incl = c.gt, False
            hi, hi_incl = (c.le, True) if c.le is not None else (math.inf, False)
            if c.lt is not None and (c.le is None or c.lt <= c.le):
                hi, hi_incl = c.lt, False
            checks += (name, lo, hi, lo_incl, hi_incl, None)
        else:
            checks += (name, -math.inf, math.inf, False, False, c)
    return (rule, rule.capability.action, rule.allowed_by, *checks)


def _passes(checks: _Compiled, args: Any) -> bool:
    """Every check of a compiled rule holds; exactly ``Constraint.allows`` for each (numbers are
    finite, never bool)."""
    for i in range(_FIRST_CHECK, len(checks), 6):
        name = checks[i]
        if name not in args:
            return False
        value = args[name]
        general = checks[i + 5]
        if general is not None:
            if not general.allows(value):
                return False
            continue
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return False
        elif kind is not int:
            return False
        lo, hi = checks[i + 1], checks[i + 2]
        if not (lo < value or (checks[i + 3] and lo == value)) or not (
            value < hi or (checks[i + 4] and hi == value)
        ):
            return False
    return True


def _satisfies(cap: Capability, call: Call) -> bool:
    """``covers`` without the resource match, which the index has already done."""
    if cap.action != "*" and cap.action != call.action:
        return False
    args = call.args
    for name, constraint in cap.constraints:
        if name not in args or not constraint.allows(args[name]):
            return False
    return True


def _gate_applies(conditions: tuple[tuple[str, Constraint], ...], args: Any) -> bool:
    # A call that leaves out an argument the gate looks at, or gives it a value the condition
    # cannot compare (``max_tokens: "100000"`` against ``gt: 100``), needs approval: fail closed.
    return all(
        name not in args or not _comparable(c, args[name]) or c.allows(args[name]) for name, c in conditions
    )


def _comparable(c: Constraint, value: Any) -> bool:
    """Whether every operator of ``c`` can compare ``value``: a bound needs a finite number (never
    a bool), a prefix needs text, equality and membership a value of a kind they list (text for
    text, a number for numbers, a boolean for booleans). ``"0"``, ``[0]`` or ``True`` where the
    condition lists ``0`` is a spelling a lax backend may read as ``0``: not a different value."""
    bounded = c.lt is not None or c.le is not None or c.gt is not None or c.ge is not None
    if bounded and _kind(value) != "number":  # never ``math.isfinite``: it overflows on 10**400
        return False
    if c.prefix is not None and not isinstance(value, str):
        return False
    listed = ((c.eq,) if c.eq is not None else ()) + (c.one_of or ())
    return not listed or _kind(value) in {_kind(v) for v in listed}


def _kind(value: Any) -> str | None:
    """``text``, ``number`` or ``boolean`` for a value of exactly a type a condition can list;
    ``None`` otherwise. A ``Call`` holds exact built-in types (a ``str`` enum member arrives as
    the text it holds); what is still of another type is not comparable, and the gate applies."""
    kind = type(value)
    if kind is bool:
        return "boolean"
    if kind is str:
        return "text"
    if kind is int or (kind is float and math.isfinite(value)):
        return "number"
    return None


def _miss(rule: RuleRef, call: Call) -> str:
    cap = rule.capability
    if cap.action != "*" and cap.action != call.action:
        return f"{rule} is for action {cap.action}, not {call.action}"
    for name, constraint in cap.constraints:
        if name not in call.args:
            return f"{rule} requires argument {name!r}"
        if not constraint.allows(call.args[name]):
            return (
                f"{rule}: {name}={_shown(call.args[name])} does not satisfy"
                f" {describe_constraint(name, constraint)}"
            )
    return f"{rule} does not cover the call"  # pragma: no cover - covers() was false for a reason above


def _shown(value: Any) -> str:
    """``repr(value)`` for a reason, or a description of the value where it has no text: Python
    refuses to write an integer of more than 4300 digits in decimal (``ValueError``), and a
    decision on a call that holds one is a deny that says why, not that error."""
    try:
        return repr(value)
    except ValueError:
        return f"<{type(value).__name__} with an integer of too many digits to write>"


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
            hint=did_you_mean(role, policy.document.roles) or "see the roles section of the policy",
        )
    max_ttl = policy.document.settings.max_ttl_s
    ttl = min(spec.ttl_s, max_ttl) if spec.ttl_s is not None else max_ttl
    depth = spec.delegation.max_depth if spec.delegation is not None else 0
    caps = _each_once(rule.capability for rule in policy.effective_rules(role))
    return GrantTemplate(caps, spec.budget, ttl, depth)


def _each_once(capabilities: Iterable[Capability]) -> tuple[Capability, ...]:
    """``capabilities`` in order, each once. Capabilities are equal when their constraints are,
    value by value as the algebra compares values (``Constraint``): ``x = 1`` and ``x = true`` are
    two. Until review R66 they compared equal (Python's ``True == 1``), and a role's grant kept
    the first of the two only."""
    return tuple(dict.fromkeys(capabilities))
