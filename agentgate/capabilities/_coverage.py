"""The exact decisions on capabilities: ``covers`` (a capability allows a call), ``attenuates``
(every call a child covers, its parent covers) and ``witness`` (a call the child covers and the
parent does not, when there is one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentgate.capabilities._call import Call
from agentgate.capabilities._capability import Capability
from agentgate.capabilities._constraints import Constraint
from agentgate.capabilities._normal_forms import _members, _subset
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
    if not isinstance(parent, Capability) or not isinstance(child, Capability):
        raise CapabilityError(
            f"attenuates(parent, child) takes two Capability objects (parse_capability), got "
            f"{type(parent).__name__} and {type(child).__name__}"
        )
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
    """
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
