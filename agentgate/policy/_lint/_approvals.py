"""Lint rules on approval gates: a wildcard rule that reaches sibling tools taking the same
arguments that no gate stops (scope_creep), an agent named as an approver
(implicit_trust_inheritance), and a gate on a resource or an argument nothing declares, one
that no approval can satisfy for an approver's own calls, or one that names an approver twice
(authority_chain_opacity).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence

from agentgate.capabilities import Capability, Constraint, Scalar, attenuates, intersects, pattern_matches
from agentgate.findings import Finding, Severity
from agentgate.policy._index import _INT_RANGE, _comparable, wild_ancestors
from agentgate.policy._lint._common import (
    _LISTED,
    INHERIT,
    OPAQUE,
    SCOPE,
    LintRule,
    _declared,
    _fits,
    _greatest_integer,
    _least_integer,
    _listed,
    _named_patterns,
    _quoted,
    _satisfiable,
    _tools_by_pattern,
    _tools_named,
)
from agentgate.policy._load import Policy, RuleRef
from agentgate.policy._schema import Argument, Tool


def _by_pattern(resources: list[str]) -> dict[str, list[str]]:
    """Every wildcard pattern that names one of ``resources`` -> those it names, in order."""
    out: dict[str, list[str]] = {}
    for resource in resources:
        for pattern in wild_ancestors(resource):
            out.setdefault(pattern, []).append(resource)
    return out


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
        # Tool -> the gates that guard it, each with the types the tool declares for the
        # arguments the gate looks at (what decides whether it stops a call, ``_stops``).
        gates_on: dict[str, list[tuple[str, tuple[str | None, ...]]]] = {}
        tools = policy.document.tools
        for g, named in guarded.items():
            looks_at = [a for a, _ in policy.gate_conditions.get(g, ())]
            for r in named:
                if r.startswith("tool:"):
                    args = tools[r.removeprefix("tool:")].args
                    types = tuple(args[a].type if a in args else None for a in looks_at)
                    gates_on.setdefault(r, []).append((g, types))
        spans = {pattern: _RuleSpans(rules) for pattern, rules in _wildcard_rules(policy).items()}
        siblings = _Siblings(policy, by_pattern)
        for gname, gate in policy.document.approvals.items():
            gated = guarded[gname]
            if not gated:
                continue
            reaching = _rules_reaching(gated, spans, policy.gate_conditions.get(gname, ()))
            if not reaching:
                continue
            around = _paths_around(policy, gname, gated, reaching, siblings, gates_on)
            for rule, names, count in around:
                more = f", and {count - len(names)} more" if count > len(names) else ""
                yield self.finding(
                    policy,
                    f"{rule} reaches {', '.join(names)}{more}, which take the same arguments as "
                    f"{gate.resource} but pass no approval gate {gname}",
                    rule.line,
                )


_Kinds = dict[tuple[str | None, ...], tuple[Mapping[str, Argument], list[str]]]
"""Sibling tools that take the same arguments, by the types they declare for the arguments a
rule constrains (``None``: not declared), each kind with one member's arguments and its members
in name order (``_sibling_kinds``)."""


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
    gated: set[str],
    spans: Mapping[str, _RuleSpans],
    conditions: tuple[tuple[str, Constraint], ...],
) -> list[tuple[int, int, RuleRef]]:
    """The wildcard rules that reach a tool in ``gated`` and may admit a call a gate with
    ``conditions`` stops (``_RuleSpans.candidates``), in the order the policy lists them."""
    return sorted(
        (
            found
            for pattern in _named_patterns(sorted(gated))
            if pattern in spans
            for found in spans[pattern].candidates(conditions)
        ),
        key=lambda found: found[:2],
    )


def _numeric_span(constraint: Constraint) -> tuple[float, float] | None:
    """The least and the greatest number ``constraint`` may allow, when it allows numbers only
    (a bool is no number here), else ``None``. A superset: a listed value the bounds refuse
    still counts."""
    if constraint.prefix is not None:
        return None
    listed = ((constraint.eq,) if constraint.eq is not None else ()) + (constraint.one_of or ())
    if listed:
        numbers = [v for v in listed if type(v) is int or type(v) is float]
        if len(numbers) < len(listed):
            return None
        return min(numbers), max(numbers)
    lower = [b for b in (constraint.gt, constraint.ge) if b is not None]
    upper = [b for b in (constraint.lt, constraint.le) if b is not None]
    if not lower and not upper:
        return None
    return max(lower, default=-math.inf), min(upper, default=math.inf)


class _RuleSpans:
    """The wildcard rules on one pattern, in policy order, with the numbers each allows for each
    argument it constrains to numbers, sorted by least and by greatest.

    Whether a rule admits a call a gate stops is decided per pair (``_admits_gated_call``), and
    comparing every gate with every rule cost gates x rules (1,000 of each: 8 s, review R66). A
    rule that allows only numbers in ``[a, b]`` for an argument, and a gate whose condition on it
    holds only for numbers in ``[c, d]`` with no number in common, never meet: on a tool declaring
    it a number both keep their numbers, and on any other type, or none, the rule admits no call.
    So a gate is compared with the rules that leave one of its arguments open, or constrain it
    otherwise, and those whose numbers may meet its condition there: found by bisection, on the
    argument that keeps fewest.
    """

    def __init__(self, rules: list[tuple[int, int, RuleRef]]) -> None:
        self.rules = rules
        spans: dict[str, dict[int, tuple[float, float]]] = {}
        for i, (_position, _index, rule) in enumerate(rules):
            for arg, constraint in rule.capability.constraints:
                span = _numeric_span(constraint)
                if span is not None:
                    spans.setdefault(arg, {})[i] = span
        self.spans = spans
        self.open = {arg: [i for i in range(len(rules)) if i not in held] for arg, held in spans.items()}
        self.by_least = {arg: sorted((lo, i) for i, (lo, _hi) in held.items()) for arg, held in spans.items()}
        self.by_greatest = {
            arg: sorted((hi, i) for i, (_lo, hi) in held.items()) for arg, held in spans.items()
        }

    def candidates(self, conditions: tuple[tuple[str, Constraint], ...]) -> list[tuple[int, int, RuleRef]]:
        """The rules that may admit a call a gate with ``conditions`` stops (a superset)."""
        best: tuple[int, str, float, float] | None = None  # the fewest kept: how many, where
        for arg, condition in conditions:
            span = _numeric_span(condition)
            if span is not None and arg in self.spans:
                size = len(self.open[arg]) + min(self._below(arg, span[1]), self._above(arg, span[0]))
                if best is None or size < best[0]:
                    best = (size, arg, *span)
        if best is None:
            return self.rules
        _size, arg, least, greatest = best
        held = self.spans[arg]
        below, above = self._below(arg, greatest), self._above(arg, least)
        # A rule that meets the condition is among those whose least number is at most the
        # condition's greatest, and among those whose greatest is at least its least.
        meeting = (
            [i for _lo, i in self.by_least[arg][:below] if held[i][1] >= least]
            if below <= above
            else [i for _hi, i in self.by_greatest[arg][len(held) - above :] if held[i][0] <= greatest]
        )
        return [self.rules[i] for i in self.open[arg] + meeting]

    def _below(self, arg: str, greatest: float) -> int:
        """How many rules allow for ``arg`` a least number at most ``greatest``."""
        return bisect.bisect_right(self.by_least[arg], (greatest, math.inf))

    def _above(self, arg: str, least: float) -> int:
        """How many rules allow for ``arg`` a greatest number at least ``least``."""
        return len(self.by_greatest[arg]) - bisect.bisect_left(self.by_greatest[arg], (least, -math.inf))


class _Siblings:
    """The declared tools each wildcard pattern names, by the arguments they declare, to find
    those that take the same arguments as a gate's tools (``taking``) and group them by kind
    (``kinds``), each once.

    Until review R83 each (pattern, arguments looked at, arguments constrained) walked every tool
    the pattern names: 1,000 gates each looking at its own argument, and 60 rules on ``tool:*``,
    walked the 1,000 tools 60,000 times (43 s for a 118 KB policy). A set of arguments is now
    looked up among the tools declaring the one fewest tools declare."""

    def __init__(self, policy: Policy, by_pattern: Mapping[str, Sequence[str]]) -> None:
        self.tools = policy.document.tools
        self.by_pattern = by_pattern
        self._named: dict[str, tuple[list[str], dict[str, list[str]]]] = {}
        self._taking: dict[tuple[str, frozenset[frozenset[str]]], list[str]] = {}
        self._kinds: dict[tuple[str, tuple[str, ...], frozenset[frozenset[str]]], _Kinds] = {}

    def kinds(
        self, pattern: str, constrained: tuple[str, ...], looked_at: frozenset[frozenset[str]]
    ) -> _Kinds:
        """The tools of ``pattern`` that take the same arguments (``taking``), by the types they
        declare for the ``constrained`` arguments (``_Kinds``)."""
        key = (pattern, constrained, looked_at)
        kinds = self._kinds.get(key)
        if kinds is None:
            kinds = self._kinds[key] = _sibling_kinds(
                self.tools, self.taking(pattern, looked_at), constrained
            )
        return kinds

    def taking(self, pattern: str, looked_at: frozenset[frozenset[str]]) -> list[str]:
        """The tools of ``pattern`` that declare every one of a set in ``looked_at``, in name order."""
        key = (pattern, looked_at)
        taking = self._taking.get(key)
        if taking is None:
            every, by_argument = self._named_by(pattern)
            found: set[str] = set()
            for same in looked_at:
                # Only a tool declaring the argument fewest tools declare may declare them all.
                fewest = min((by_argument.get(a, []) for a in same), key=len) if same else every
                found.update(r for r in fewest if same <= self.tools[r.removeprefix("tool:")].args.keys())
            taking = self._taking[key] = sorted(found)
        return taking

    def _named_by(self, pattern: str) -> tuple[list[str], dict[str, list[str]]]:
        """The declared tools ``pattern`` names, and by argument those that declare it."""
        named = self._named.get(pattern)
        if named is None:
            every = [r for r in self.by_pattern.get(pattern, ()) if r.startswith("tool:")]
            by_argument: dict[str, list[str]] = {}
            for r in every:
                for arg in self.tools[r.removeprefix("tool:")].args:
                    by_argument.setdefault(arg, []).append(r)
            named = self._named[pattern] = (every, by_argument)
        return named


def _sibling_kinds(
    tools: Mapping[str, Tool], siblings: Sequence[str], constrained: tuple[str, ...]
) -> _Kinds:
    """The tools of ``siblings`` (in name order) by the types they declare for the ``constrained``
    arguments (``_Kinds``)."""
    out: _Kinds = {}
    for r in siblings:
        args = tools[r.removeprefix("tool:")].args
        types = tuple(args[a].type if a in args else None for a in constrained)
        out.setdefault(types, (args, []))[1].append(r)
    return out


def _paths_around(
    policy: Policy,
    gname: str,
    gated: set[str],
    reaching: Sequence[tuple[int, int, RuleRef]],
    siblings: _Siblings,
    gates_on: Mapping[str, list[tuple[str, tuple[str | None, ...]]]],
) -> Iterator[tuple[RuleRef, list[str], int]]:
    """Each rule of ``reaching`` with the sibling tools it opens around gate ``gname`` (the first
    ``_LISTED`` in name order, and how many in all): tools that take the same arguments, that no
    other gate stops, and on which the rule admits a call the gate would stop. ``siblings`` keeps
    the siblings of a pattern by kind from one gate to the next."""
    tools = policy.document.tools
    gate = policy.document.approvals[gname]
    # A sibling takes "the same arguments" when it declares those the gate looks at, or,
    # for a gate on every call, those of a tool the gate guards.
    looked_at = frozenset(
        {frozenset(gate.when)}
        if gate.when
        else {frozenset(tools[r.removeprefix("tool:")].args) for r in gated if r.startswith("tool:")}
    )
    conditions = policy.gate_conditions.get(gname, ())
    # Whether a rule admits a call the gate would stop (`amount <= 500` does not get around
    # `amount > 500`) depends on the types its siblings declare for the arguments it constrains,
    # not on which sibling: decided once for each kind of sibling. Which siblings of a kind no
    # other gate stops depends on the gate, not on the rule: found once for each kind. Until
    # review R65b each sibling was looked at for each rule of each gate (a 215 KB policy of
    # 1,000 gates, 1,000 tools and 64 rules on their pattern did not lint in 200 s).
    admits: dict[tuple[tuple[tuple[str, Constraint], ...], tuple[str | None, ...]], bool] = {}
    opened: dict[tuple[str, tuple[str, ...], tuple[str | None, ...]], list[str]] = {}
    # Another gate on a sibling, and the types the sibling declares for what it looks at -> whether
    # it stops every call this one does.
    stops: dict[tuple[str, tuple[str | None, ...]], bool] = {}
    stopped = dict(conditions)
    for _position, _index, rule in reaching:
        pattern, constraints = rule.capability.resource, rule.capability.constraints
        constrained = tuple(a for a, _ in constraints)
        found: list[list[str]] = []
        for types, (args, members) in siblings.kinds(pattern, constrained, looked_at).items():
            admitted = admits.get((constraints, types))
            if admitted is None:
                admitted = admits[constraints, types] = _admits_gated_call(constraints, conditions, args)
            if not admitted:
                continue
            paths = opened.get((pattern, constrained, types))
            if paths is None:
                # A tool that another gate stops on every call this one stops is no path
                # around it (asked of the gates on that tool only, not of every gate).
                paths = opened[pattern, constrained, types] = [
                    r
                    for r in members
                    if r not in gated
                    and not any(
                        _stops(policy, other, types, stopped, stops)
                        for other, types in gates_on.get(r, ())
                        if other != gname
                    )
                ]
            if paths:
                found.append(paths)
        if found:
            yield rule, list(itertools.islice(heapq.merge(*found), _LISTED)), sum(map(len, found))


def _stops(
    policy: Policy,
    other: str,
    types: tuple[str | None, ...],
    than: Mapping[str, Constraint],
    known: dict[tuple[str, tuple[str | None, ...]], bool],
) -> bool:
    """Whether approval gate ``other``, on a tool declaring the arguments it looks at of
    ``types``, applies to every call there a gate with conditions ``than`` applies to
    (``_applies_whenever``), kept in ``known``."""
    stopped = known.get((other, types))
    if stopped is None:
        conditions = policy.gate_conditions.get(other, ())
        stopped = known[other, types] = _applies_whenever(conditions, types, than)
    return stopped


def _applies_whenever(
    conditions: tuple[tuple[str, Constraint], ...],
    types: tuple[str | None, ...],
    than: Mapping[str, Constraint],
) -> bool:
    """Whether a gate with ``conditions``, on a tool declaring their arguments of ``types``
    (``None``: not declared), applies to every call there a gate with conditions ``than``
    applies to. Each condition holds for every call (``_holds_always``), or ``than`` looks at its
    argument too, with a condition that can compare a value of the type (else it applies to every
    value) and is at least as narrow (a call missing the argument needs approval from both).
    Until review R83 a condition that holds for every call (``prefix: ""``, or one the type
    cannot compare) counted as narrower than none, and the gate as one that some calls pass."""
    return all(
        _holds_always(condition, kind)
        or (
            arg in than
            and kind is not None
            and _comparable(than[arg], _OF_TYPE[kind])
            and _within(than[arg], condition)
        )
        for (arg, condition), kind in zip(conditions, types, strict=True)
    )


# The least and the greatest value a call may give an argument of each declared type
# (``_check_arguments``): a condition of bounds alone that allows both allows every value between.
_ENDS: dict[str, tuple[Scalar, ...]] = {
    "string": ("",),
    "integer": (1 - _INT_RANGE, _INT_RANGE - 1),
    "number": (-sys.float_info.max, sys.float_info.max),
    "boolean": (False, True),
}


def _holds_always(condition: Constraint, kind: str | None) -> bool:
    """Whether a gate's ``condition`` holds for every call on a tool declaring its argument of
    ``kind`` (``None``: not declared), as the run time decides (``_gate_applies``): a call that
    leaves the argument out (every call, where it is not declared: a call giving it is denied),
    or gives a value the condition cannot compare, needs approval; any other, when the condition
    allows its value. So it holds always where the type cannot be compared, or where every value
    of the type is allowed: none of a type of infinitely many values is, when the condition lists
    values; ``prefix: ""`` allows every text; bounds, every number between the two ends."""
    if kind is None or not _comparable(condition, _OF_TYPE[kind]):
        return True
    if (condition.eq is not None or condition.one_of is not None) and kind != "boolean":
        return False
    return all(condition.allows(v) for v in _ENDS[kind])


def _within(inner: Constraint, outer: Constraint) -> bool:
    """Whether every value ``inner`` admits, ``outer`` admits too."""
    # A value ``inner`` lists that ``outer`` refuses answers at once: gates that each look at
    # their own few values are thousands of distinct pairs, each a comparison of normal forms.
    listed = ((inner.eq,) if inner.eq is not None else ()) + (inner.one_of or ())
    if any(inner.allows(v) and not outer.allows(v) for v in listed):
        return False
    return _attenuates_within(inner, outer)


@functools.lru_cache(maxsize=4096)
def _attenuates_within(inner: Constraint, outer: Constraint) -> bool:
    """``_within``, decided by ``attenuates`` (kept by the constraints, which tell ``x = 1`` from
    ``x = true`` since review R66)."""
    return attenuates(
        Capability("tool:x", "invoke", (("v", outer),)), Capability("tool:x", "invoke", (("v", inner),))
    )


def _admits_gated_call(
    rule: tuple[tuple[str, Constraint], ...],
    conditions: tuple[tuple[str, Constraint], ...],
    args: Mapping[str, Argument],
) -> bool:
    """Whether a rule with constraints ``rule`` admits a call on a tool declaring ``args`` that a gate with ``conditions``
    would stop: each argument the rule constrains is declared and can take a value of its type
    that the rule admits, and on each argument the gate looks at, some such value meets the
    condition. An argument the rule leaves open may take any value, or none (a gate without
    conditions stops every call)."""
    admitted: dict[str, Constraint] = {}
    for arg, constraint in rule:
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


@functools.lru_cache(maxsize=8192)
def _of_type(constraint: Constraint, kind: str) -> Constraint | None:
    """The values of the declared ``kind`` that ``constraint`` allows, as a constraint, or ``None``
    when there is none. Integers are the whole numbers within the bounds, closed, so that two
    such constraints intersect exactly when an integer satisfies both. A side whose integer bound
    a constraint cannot hold (``|v| >= 2**63``, or none) keeps the constraint's own bounds there:
    beyond ``2**63`` a float bound is a whole number, and no two such floats are one apart, so no
    real both meet lies off the integers. An integer of any size counts, also one no call may give
    (``|v| >= 2**63``): a rule that admits only such is ``constraint_type_mismatch``'s finding."""
    if constraint.is_empty:
        return None
    listed = ((constraint.eq,) if constraint.eq is not None else ()) + (constraint.one_of or ())
    if listed:
        kept = tuple(v for v in listed if _fits(kind, v, math.inf) and constraint.allows(v))
        return Constraint(one_of=kept) if kept else None
    if not _satisfiable(kind, constraint, math.inf):
        return None
    if kind == "integer":
        lo, hi = _least_integer(constraint), _greatest_integer(constraint)
        lower = {"ge": lo} if abs(lo) < 2**63 else {"gt": constraint.gt, "ge": constraint.ge}
        upper = {"le": hi} if abs(hi) < 2**63 else {"lt": constraint.lt, "le": constraint.le}
        return Constraint(**lower, **upper)
    return constraint


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


class ApproverListedTwice(LintRule):
    code = "approver_listed_twice"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "list each approver once; name another person if another sign-off was meant"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # The loader allows it (an approver counts once toward the quorum), but a reviewer reading
        # [bob, bob] counts two people where one can sign.
        for gname, gate in policy.document.approvals.items():
            entries: dict[str, list[int]] = {}
            for i, approver in enumerate(gate.approvers):
                entries.setdefault(approver, []).append(i)
            for approver, at in entries.items():
                if len(at) < 2:
                    continue
                times = "twice" if len(at) == 2 else f"{len(at)} times"
                listed = ", ".join(str(i + 1) for i in at[:-1]) + f" and {at[-1] + 1}"
                yield self.finding(
                    policy,
                    f"approval gate {gname} lists approver {approver} {times} (entries {listed}): an "
                    "approver counts once toward the quorum, so the list names fewer people than it reads",
                    policy.line_of("approvals", gname, "approvers", at[1]),
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
            # One finding for each set of missing arguments (until review R66, for each tool).
            lacking: dict[tuple[str, ...], list[str]] = {}
            for name in names:
                missing = tuple(sorted(a for a in gate.when if a not in tools[name].args))
                if missing:
                    lacking.setdefault(missing, []).append(f"tool:{name}")
            for missing, lack in lacking.items():
                does = "does" if len(lack) == 1 else "do"
                yield self.finding(
                    policy,
                    f"approval gate {gname} looks at {', '.join(map(_quoted, missing))}, which {_listed(lack)} {does} not declare",
                    policy.line_of("approvals", gname, "when"),
                )


class ApprovalUnreachable(LintRule):
    code = "approval_unreachable"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = (
        "name another approver (nobody approves their own call), lower the quorum, or take the "
        "gated call from the approver's roles"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        document = policy.document
        declared = _declared(policy)
        by_pattern = _by_pattern(declared)
        guarded = _gated_tools(policy, by_pattern, set(declared))
        # The (gate, approver) pairs to decide, in the order their findings are reported, by the
        # roles the approver holds (in the order held, which decides the rule a message names):
        # what an approver may call depends on those alone, so it is found once for each such
        # list of roles, and kept only while the approvers holding it are decided. Until
        # review R83 it was found for each approver and every one kept to the end (an 87 KB
        # policy of 300 approvers of one role: 111 s and 6.6 GB).
        asked: list[tuple[str, str]] = []
        by_roles: dict[tuple[str, ...], list[int]] = {}
        # Gate -> each distinct approver -> the position it is first listed at, found once per
        # gate: until review R88 each finding listed the gate's approvers again and searched them
        # (``index``), quadratic in a gate's entries.
        first_at: dict[str, dict[str, int]] = {}
        for gname, gate in document.approvals.items():
            approvers: dict[str, int] = {}
            for at, approver in enumerate(gate.approvers):
                approvers.setdefault(approver, at)
            # A model a gate guards is in no tool call's reach: never hit.
            if len(approvers) - 1 >= gate.quorum or not guarded[gname]:
                continue  # every approver's own call still has enough others to approve it
            first_at[gname] = approvers
            for approver in approvers:
                by_roles.setdefault(policy.principal_roles(approver), []).append(len(asked))
                asked.append((gname, approver))
        held: dict[int, RuleRef] = {}  # position in ``asked`` -> a rule admitting a gated call
        for roles, positions in by_roles.items():
            calls = _calls_held(policy, roles, by_pattern)
            for position in positions:
                gname = asked[position][0]
                rule = _gated_call_held(calls, guarded[gname], policy.gate_conditions.get(gname, ()))
                if rule is not None:
                    held[position] = rule
            del calls  # before the next set of roles' table is built, not after
        for position in sorted(held):
            gname, approver = asked[position]
            approvers = first_at[gname]
            yield self.finding(
                policy,
                f"{approver} may make calls approval gate {gname} stops ({held[position]}), and without "
                f"{approver} only {len(approvers) - 1} approver(s) remain for a quorum of "
                f"{document.approvals[gname].quorum}: no approval of those calls can be valid, so they are denied",
                policy.line_of("approvals", gname, "approvers", approvers[approver]),
            )


_Shape = tuple[tuple[tuple[str, Constraint], ...], tuple[tuple[str, str], ...]]
"""A rule's constraints and the declared arguments (name, type) of a tool it reaches: what
``_admits_gated_call`` reads of the pair."""

_Calls = tuple[list[tuple[_Shape, dict[str, RuleRef]]], dict[str, list[int]]]
"""What ``_calls_held`` finds: the shapes in the order the roles first reach them, each with the
declared tools a rule of that shape reaches and the first such rule; and, by tool, the positions
of the shapes that reach it."""


def _calls_held(policy: Policy, roles: Iterable[str], by_pattern: Mapping[str, Sequence[str]]) -> _Calls:
    """The tool calls a holder of ``roles`` admits (``Policy.principal_roles``: the inherited ones
    included), by shape (``_Calls``).
    A policy's rules and tools mostly share a few shapes, so a gate is checked against each shape
    once, not against every rule and tool (gates x tools checks took tens of seconds), and only
    against the shapes that reach a tool it guards (until review R65b, every shape: gates x
    rules x tools)."""
    tools = policy.document.tools
    declared: dict[str, tuple[tuple[str, str], ...]] = {}  # tool -> its arguments, (name, type) sorted
    for name, spec in tools.items():
        declared[f"tool:{name}"] = tuple(sorted((a, arg.type) for a, arg in spec.args.items()))
    shapes: list[tuple[_Shape, dict[str, RuleRef]]] = []
    # By constraints, then by arguments: a rule's constraints are looked up once, not once for
    # each tool it reaches (a constraint's hash is not cached).
    found: dict[
        tuple[tuple[str, Constraint], ...], dict[tuple[tuple[str, str], ...], dict[str, RuleRef]]
    ] = {}
    for role in roles:
        for rule in policy.rules.get(role, ()):
            cap = rule.capability
            if cap.action not in ("*", "invoke") or not cap.resource.startswith("tool:"):
                continue
            reached = by_pattern.get(cap.resource, ()) if cap.resource.endswith("*") else (cap.resource,)
            by_args = found.setdefault(cap.constraints, {})
            for tool in reached:
                args = declared.get(tool)
                if args is None:
                    continue
                held = by_args.get(args)
                if held is None:
                    held = by_args[args] = {}
                    shapes.append(((cap.constraints, args), held))
                held.setdefault(tool, rule)
    reaching: dict[str, list[int]] = {}
    for position, (_shape, held_on) in enumerate(shapes):
        for tool in held_on:
            reaching.setdefault(tool, []).append(position)
    return shapes, reaching


def _gated_call_held(
    calls: _Calls, gated: set[str], conditions: tuple[tuple[str, Constraint], ...]
) -> RuleRef | None:
    """A rule of ``calls`` (``_calls_held``) that admits a call on one of the ``gated`` tools that
    a gate with ``conditions`` stops, else ``None``: of the first shape, in order, that reaches a
    gated tool and admits such a call, the rule for the first such tool by name."""
    shapes, reaching = calls
    # The shapes that reach a gated tool, looked up by tool; a gate on more tools than there are
    # shapes (``tool:*``) asks each shape instead.
    positions: Iterable[int] = (
        sorted({p for tool in gated for p in reaching.get(tool, ())})
        if len(gated) < len(shapes)
        else range(len(shapes))
    )
    for position in positions:
        (constraints, args), reached = shapes[position]
        hit = reached.keys() & gated  # by the smaller of the two
        if hit and _admits_shape(constraints, conditions, args):
            return reached[min(hit)]
    return None


@functools.lru_cache(maxsize=4096)
def _admits_shape(
    constraints: tuple[tuple[str, Constraint], ...],
    conditions: tuple[tuple[str, Constraint], ...],
    args: tuple[tuple[str, str], ...],
) -> bool:
    """``_admits_gated_call`` for a rule's ``constraints`` on a tool declaring ``args``."""
    declared = {a: Argument(type=t) for a, t in args}  # type: ignore[arg-type]
    return _admits_gated_call(constraints, conditions, declared)
