"""The exact decisions on capabilities: ``covers`` (a capability allows a call), ``attenuates``
(every call a child covers, its parent covers) and ``witness`` (a call the child covers and the
parent does not, when there is one); and, against several parents, for the message of a child
within none of them (``authority._chain_findings``), a bounded search for a call none covers
(``uncovered_call``) and a sufficient test that they cover the child together
(``covered_together``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from agentgate.capabilities._call import Call
from agentgate.capabilities._capability import Capability
from agentgate.capabilities._constraints import Constraint
from agentgate.capabilities._normal_forms import (
    _Empty,
    _Finite,
    _Interval,
    _members,
    _nearest,
    _Normal,
    _subset,
)
from agentgate.capabilities._resources import _pattern_witness, pattern_matches, pattern_within
from agentgate.capabilities._values import MAX_SET_SIZE, Scalar
from agentgate.errors import CapabilityError


def covers(capability: Capability, call: Call) -> bool:
    """Whether ``capability`` allows ``call``: resource, action, and every constraint (a missing argument fails).

    Raises ``CapabilityError`` when given anything but a ``Capability`` and a ``Call``."""
    if not isinstance(capability, Capability) or not isinstance(call, Call):
        raise CapabilityError(
            f"covers(capability, call) takes a Capability and a Call, got "
            f"{type(capability).__name__} and {type(call).__name__}"
        )
    if not pattern_matches(capability.resource, call.resource):
        return False
    if capability.action != "*" and capability.action != call.action:
        return False
    for name, constraint in capability.constraints:
        if name not in call.args or not constraint.allows(call.args[name]):
            return False
    return True


def _require_two(function: str, parent: object, child: object) -> None:
    """Refuse, for ``function(parent, child)``, anything but two ``Capability`` objects
    (``CapabilityError`` naming what it got)."""
    if not isinstance(parent, Capability) or not isinstance(child, Capability):
        raise CapabilityError(
            f"{function}(parent, child) takes two Capability objects (parse_capability), got "
            f"{type(parent).__name__} and {type(child).__name__}"
        )


def attenuates(parent: Capability, child: Capability) -> bool:
    """Exact: every call that ``child`` covers, ``parent`` covers too.

    Decided on the normal forms directly (no witness is built), over the reals: it agrees with
    ``witness`` except for a child wider only by reals that no integer or double can be
    (``gt: 4.999999999999999, lt: 5`` under ``eq: 1``; ``lt: 2**60 + 1`` under ``le: 2**60``),
    where it answers False and ``witness`` finds no call (``None``). A child field left
    unconstrained where the parent constrains it is wider, since every constraint refuses some
    value.

    Raises ``CapabilityError`` when given anything but two ``Capability`` objects.
    """
    _require_two("attenuates", parent, child)
    child_map = child.constraint_map
    if any(c.is_empty for c in child_map.values()):
        return True
    if not pattern_within(child.resource, parent.resource):
        return False
    if parent.action != "*" and child.action != parent.action:
        return False
    for name, p_constraint in parent.constraints:
        c_constraint = child_map.get(name)
        if c_constraint is None or not _subset(c_constraint._normal, p_constraint._normal):
            return False
    return True


_NOTHING = object()


def witness(parent: Capability, child: Capability) -> Call | None:
    """A call that ``child`` covers and ``parent`` does not, or ``None`` when ``child`` attenuates ``parent``.

    A child with a contradictory constraint covers nothing and so attenuates anything; so does
    one that no number can satisfy although it is not a contradiction over the reals (``gt:
    4.999999999999999, lt: 5``: no integer and no double lies between the two), and one wider
    than its parent only by such numbers (``lt: 2**60 + 1`` under ``le: 2**60``: no integer and
    no double lies strictly between 2**60 and 2**60 + 1).

    Raises ``CapabilityError`` when given anything but two ``Capability`` objects.
    """
    _require_two("witness", parent, child)
    if any(c.is_empty for _, c in child.constraints):
        return None
    child_map = child.constraint_map
    base_args: dict[str, Any] = {}
    for name, constraint in child.constraints:
        member = next((v for v in _members(constraint._normal, None) if constraint.allows(v)), _NOTHING)
        if member is _NOTHING:
            return None
        base_args[name] = member
    resource = _pattern_witness(child.resource, parent.resource)
    action = child.action if child.action != "*" else ("zz_witness" if parent.action != "*" else "invoke")
    if not pattern_within(child.resource, parent.resource):
        return Call(resource, action, base_args)
    if parent.action != "*" and action != parent.action:
        return Call(resource, action, base_args)
    for name, p_constraint in parent.constraints:
        c_constraint = child_map.get(name)
        if c_constraint is None:
            for value in _violations(p_constraint):
                return Call(resource, action, {**base_args, name: value})
            continue  # pragma: no cover - every constraint refuses some value (_violations)
        if not _subset(c_constraint._normal, p_constraint._normal):
            for value in _members(c_constraint._normal, p_constraint._normal):
                if c_constraint.allows(value) and not p_constraint.allows(value):
                    return Call(resource, action, {**base_args, name: value})
            # Wider only by reals no integer or double can be (``lt: 2**60 + 1`` under ``le: 2**60``).
    return None


def _violations(constraint: Constraint) -> Iterable[Scalar]:
    """Values that ``constraint`` refuses (every constraint refuses something)."""
    for value in ("\x00zz-witness", -1e300, 1e300, True, 0):
        if not constraint.allows(value):
            yield value
    # Only a finite set holds all of those, and no set holds more strings than its size.
    for k in range(MAX_SET_SIZE + 1):
        value = f"\x00zz-witness-{k}"
        if not constraint.allows(value):
            yield value


SEARCH_TRIES_PER_VALUE = 6
"""How many values ``uncovered_call`` may try for each value the parents and the child constrain
with (a set's every value, a range's or prefix's one), besides ``SEARCH_TRIES_FLOOR``. A value
tried is checked against the child's constraint on the argument it changes and the parents'
(at most one each), so the work is at most the values tried times one more than the parents:
in proportion to what the capabilities hold times how many there are (a grant holds at most 16).
The search tries at most six values at a bound (the bound as an integer and as a double, and
their neighbours), each once: a range whose other bound is shared or unbounded (a parent's range
split in pieces, ``amount<=100``) never needs more than six, and only a search among more than
160 ranges with two bounds of their own each is cut short. Until review R90 each value
tried rebuilt and checked the whole call, so one hand-signed link of 480 arguments cost tens of
times a decision's own work on every decision that refused it (a reviewer's scratch script); R90 counted checks, 16 for each value constrained
with, and so also cut short a short search against 16 ranges on one argument."""

SEARCH_TRIES_FLOOR = 1000
"""Values ``uncovered_call`` may always try: every search among up to 80 ranges."""


def uncovered_call(parents: Sequence[Capability], child: Capability, base: Call) -> tuple[str, Call] | None:
    """A call that ``child`` covers and none of ``parents`` does, with the name of the argument
    changed to find it, found near the bounds: ``base``
    (a call ``child`` covers, its arguments ``child``'s own) with one argument ``child``
    constrains changed to one of ``child``'s own values or to a number at or next to a bound of
    ``child``'s or a parent's constraint on it (the integer and the doubles either side). So a
    gap between the parents' ranges (``amount=101`` under ``amount<=100`` and ``amount>=200``) is
    found, where each parent's ``witness`` may be a call another parent covers.

    ``None`` when none is found: the parents may cover ``child`` together (``covered_together``
    says where they surely do), or every call outside them differs from ``base`` in more than one
    argument, or the search ran out of values to try first. It tries at most
    ``SEARCH_TRIES_FLOOR`` values plus ``SEARCH_TRIES_PER_VALUE`` for each value the parents and
    ``child`` constrain with (``_weight``): each parent is checked against ``base`` once, and each
    value tried only against ``child``'s constraint and the parents' constraints on the argument
    changed, of the parents that ``base`` fails on no other one.

    Raises ``CapabilityError`` when given anything but a sequence of ``Capability`` objects, a
    ``Capability`` and a ``Call``."""
    shown = _parents_shown(parents)
    if shown is not None or not isinstance(child, Capability) or not isinstance(base, Call):
        raise CapabilityError(
            "uncovered_call(parents, child, base) takes a sequence of Capability objects, a Capability "
            f"and a Call, got {shown or 'Capability objects'}, {type(child).__name__} and {type(base).__name__}"
        )
    budget = SEARCH_TRIES_FLOOR + SEARCH_TRIES_PER_VALUE * sum(_weight(c) for c in (child, *parents))
    maps = [p.constraint_map for p in parents]
    # The parents that can cover a call differing from ``base`` in one argument, each with the
    # argument ``base`` fails it on (``None``: none): only its constraint on the argument changed
    # is checked again, where ``covers`` would check every argument of a copy of the call.
    open_parents: list[tuple[dict[str, Constraint], str | None]] = []
    for p, p_map in zip(parents, maps, strict=True):
        if not pattern_matches(p.resource, base.resource) or p.action not in ("*", base.action):
            continue
        failed: list[str] = []
        for name, constraint in p.constraints:
            if name not in base.args or not constraint.allows(base.args[name]):
                failed.append(name)
                if len(failed) > 1:
                    break
        if len(failed) <= 1:
            open_parents.append((p_map, failed[0] if failed else None))
    tried = 0
    for name, constraint in child.constraints:
        held = [p_map[name] for p_map in maps if name in p_map]
        deciding = [p_map for p_map, failed in open_parents if failed in (None, name)]
        if not held or any(name not in p_map for p_map in deciding):
            continue  # one of them covers ``base`` with any value of this argument
        held_here = [p_map[name] for p_map in deciding]
        for value in _near_bounds(constraint, held):
            tried += 1
            if tried > budget:
                return None
            if constraint.allows(value) and not any(c.allows(value) for c in held_here):
                return name, Call(base.resource, base.action, {**base.args, name: value})
    return None


def _weight(capability: Capability) -> int:
    """How many values ``capability`` constrains with: each value of a set, one for any other constraint."""
    return sum(
        len(c._normal.values) if isinstance(c._normal, _Finite) else 1 for _, c in capability.constraints
    )


def _parents_shown(parents: object) -> str | None:
    """``None`` for a sequence (not a string) of ``Capability`` objects; else what ``parents`` is,
    for a refusal: its type, or the type of the first item that is not a ``Capability``."""
    if isinstance(parents, str | bytes) or not isinstance(parents, Sequence):
        return type(parents).__name__
    odd = next((p for p in parents if not isinstance(p, Capability)), _NOTHING)
    return None if odd is _NOTHING else f"a {type(parents).__name__} holding a {type(odd).__name__}"


def _near_bounds(constraint: Constraint, held: Sequence[Constraint]) -> Iterable[Scalar]:
    """``constraint``'s own values (a finite set), then the integers and doubles at and next to
    each finite numeric bound of it and of ``held``, each once (a value by its type)."""
    seen: set[tuple[type, Scalar]] = set()
    own = constraint._normal
    candidates: list[Scalar] = list(own.values) if isinstance(own, _Finite) else []
    for normal in (own, *(c._normal for c in held)):
        if isinstance(normal, _Interval):
            for bound in (normal.lo, normal.hi):
                if math.isfinite(bound):
                    candidates += [_plain_number(v) for v in _nearest(bound, 1)]
    for value in candidates:
        key = (type(value), value)
        if key not in seen:
            seen.add(key)
            yield value


def _plain_number(value: float) -> Scalar:
    """``value`` as a call would give it: an integral double within 2**53 as an integer."""
    return value if type(value) is int else int(value) if value.is_integer() and abs(value) < 2**53 else value


def covered_together(parents: Sequence[Capability], child: Capability) -> bool:
    """Whether ``parents`` surely cover together every call ``child`` covers. A sufficient test:
    True where the parents that hold ``child``'s resource and action and hold it on every
    argument but one, the same one (``amount<=100`` and ``amount>100&amount<=500`` for
    ``amount<=500``), together hold every value ``child`` allows that argument, a finite set or
    an interval of them; also where one parent alone covers ``child``. False otherwise, which
    does not say a call is left out (two arguments split between parents; a gap only reals hold,
    ``gt: 4.999999999999999, lt: 5``). Quadratic in the number of parents (at most 16).

    Raises ``CapabilityError`` when given anything but a sequence of ``Capability`` objects and a
    ``Capability``."""
    shown = _parents_shown(parents)
    if shown is not None or not isinstance(child, Capability):
        raise CapabilityError(
            "covered_together(parents, child) takes a sequence of Capability objects and a Capability, "
            f"got {shown or 'Capability objects'} and {type(child).__name__}"
        )
    child_map = child.constraint_map
    by_name: dict[str, list[_Normal]] = {}
    for p in parents:
        if not pattern_within(child.resource, p.resource) or p.action not in ("*", child.action):
            continue
        wider = [
            name
            for name, held in p.constraints
            if name not in child_map or not _subset(child_map[name]._normal, held._normal)
        ]
        if not wider:
            return True
        if len(wider) == 1 and wider[0] in child_map:  # else it only adds to what the others cover
            by_name.setdefault(wider[0], []).append(p.constraint_map[wider[0]]._normal)
    return any(_union_holds(child_map[name]._normal, parts) for name, parts in by_name.items())


def _union_holds(normal: _Normal, parts: Sequence[_Normal]) -> bool:
    """Whether every value of ``normal`` is in one of ``parts``: exact for a finite set and for
    an interval (over the reals), False for a prefix (no union of others holds one that no one
    of them holds)."""
    if isinstance(normal, _Empty):
        return True
    if isinstance(normal, _Finite):
        return all(any(part.contains(v) for part in parts) for v in normal.values)
    if not isinstance(normal, _Interval):
        return False
    intervals = sorted((p for p in parts if isinstance(p, _Interval)), key=lambda i: (i.lo, i.lo_open))
    points = [p for p in parts if isinstance(p, _Finite)]
    # Every value of ``normal`` below ``at`` is held, and ``at`` itself where ``held_at``.
    at, held_at = normal.lo, normal.lo_open
    while at < normal.hi or (at == normal.hi and not (held_at or normal.hi_open)):
        best: _Interval | None = None
        for i in intervals:
            if i.lo > at or (i.lo == at and i.lo_open and not held_at):
                break  # sorted: no later one starts at or below ``at`` either
            if (i.hi > at or (i.hi == at and not held_at and not i.hi_open)) and (
                best is None or i.hi > best.hi or (i.hi == best.hi and not i.hi_open)
            ):
                best = i
        if best is not None:
            at, held_at = best.hi, not best.hi_open
        elif not held_at and any(point.contains(at) for point in points):
            held_at = True
        else:
            return False
    return True
