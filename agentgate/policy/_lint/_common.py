"""What the lint rules share: the ``LintRule`` base, the four kinds of finding, and the lookups
several rules make.

The lookups find the declared tools and models, the rules each role holds by resource pattern
(``_held_by_role``: a few lookups, not a comparison of every rule with every other), the declared
tools a pattern names, and whether some value of a declared type satisfies a constraint
(``_type_can_satisfy``, exact for the integers a call may give), and how a message writes an
argument name (``_quoted``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import ClassVar

from agentgate.capabilities import Constraint
from agentgate.findings import Finding, FindingKind, Severity
from agentgate.policy._index import _INT_RANGE, wild_ancestors
from agentgate.policy._load import Policy, RuleRef

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


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _quoted(name: str) -> str:
    """An argument name as a finding's message writes it: as it is when a plain identifier
    (``amount``), else quoted as Python writes it (``'other\\u202e'``), every character that is
    not printable escaped. A tool's ``args`` and a gate's ``when`` may name any text: bare, a name
    holding ``, `` or a bidi control read as several names or as other words of the message."""
    return name if _PLAIN_NAME.fullmatch(name) else repr(name)


_LISTED = 20
"""How many names a finding lists before "and N more" (as a load error lists names): the tools
lacking an argument, the sibling tools of an ``approval_gate_bypass`` (a policy of G gates, K
rules and T tools may open G x K paths of T tools each)."""


def _listed(names: Sequence[str]) -> str:
    """``names`` as a finding lists them: the first ``_LISTED``, then how many more."""
    more = f", and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def _declared(policy: Policy) -> list[str]:
    doc = policy.document
    return [f"tool:{n}" for n in doc.tools] + [f"model:{n}" for n in doc.models]


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


def _tools_by_pattern(policy: Policy) -> dict[str, list[str]]:
    """Every wildcard pattern that names a declared tool -> the tools it names, in declaration order."""
    out: dict[str, list[str]] = {}
    for name in policy.document.tools:
        for pattern in wild_ancestors(f"tool:{name}"):
            out.setdefault(pattern, []).append(name)
    return out


def _named_patterns(resources: list[str]) -> set[str]:
    """Every wildcard pattern that names one of ``resources``."""
    return {pattern for r in resources for pattern in wild_ancestors(r)}


def _tools_named(pattern: str, tools: Mapping[str, object], by_pattern: Mapping[str, list[str]]) -> list[str]:
    """The declared tools ``pattern`` names, in declaration order (``by_pattern``: ``_tools_by_pattern``)."""
    if not pattern.startswith("tool:"):
        return []
    if not pattern.endswith("*"):
        name = pattern.removeprefix("tool:")
        return [name] if name in tools else []
    return by_pattern.get(pattern, [])


def _type_can_satisfy(kind: str, constraint: Constraint) -> bool:
    """Whether some value of the declared ``kind`` that a call may give satisfies ``constraint``
    (exactly): for an integer, a whole number within the run time's range (``-2**63 < v < 2**63``,
    ``_check_arguments``; until review R83 an integer of any size counted)."""
    return _satisfiable(kind, constraint, _INT_RANGE)


def _integer_beyond_range(constraint: Constraint) -> bool:
    """Whether ``constraint`` admits integers, but none that a call may give (``|v| >= 2**63``)."""
    return _satisfiable("integer", constraint, math.inf) and not _type_can_satisfy("integer", constraint)


def _satisfiable(kind: str, constraint: Constraint, limit: float) -> bool:
    """``_type_can_satisfy`` for integers ``-limit < v < limit``."""
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
        return any(_fits(kind, v, limit) and constraint.allows(v) for v in values)
    if kind == "integer" and bounded:  # an interval: it must hold a whole number within the limit
        return max(_least_integer(constraint), 1 - limit) <= min(_greatest_integer(constraint), limit - 1)
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


def _fits(kind: str, value: object, limit: float = _INT_RANGE) -> bool:
    """Whether a call may give ``value`` for an argument of the declared ``kind``: for an
    integer, a whole number ``-limit < v < limit``."""
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return kind == "number" or (float(value).is_integer() and -limit < value < limit)
