"""The token parser's fast path: a capability read from its canonical token form without checking
again what canonical parsing guarantees (``capability_from_canonical``), and ``_prechecked``,
which makes a frozen dataclass from fields its caller has checked.
"""

from __future__ import annotations

import operator
from typing import Any, TypeVar

from agentgate.capabilities._capability import _ACTION, _FIELD, Capability
from agentgate.capabilities._constraints import Constraint
from agentgate.capabilities._resources import MAX_NAME_LENGTH, _check_pattern
from agentgate.capabilities._values import MAX_SET_SIZE, TOKEN_INTEGER_LIMIT, _is_text
from agentgate.errors import CapabilityError

_T = TypeVar("_T")


def _prechecked(cls: type[_T], **fields: Any) -> _T:
    """An instance of the frozen dataclass ``cls`` with ``fields`` set as they are, without
    running ``__init__``/``__post_init__``: only for values whose checks the caller has done."""
    obj = object.__new__(cls)
    vars(obj).update(fields)
    return obj


_name = operator.itemgetter(0)
_CAPABILITY_FIELDS = frozenset({"resource", "action", "constraints"})


_NO_OPERATORS: dict[str, Any] = dict.fromkeys(("eq", "one_of", "lt", "le", "gt", "ge", "prefix"))
_INTEGER_OPERATORS = frozenset({"eq", "lt", "le", "gt", "ge"})


def _constraint_from_canonical(spec: object) -> Constraint | None:
    """``Constraint.of(spec)`` for a spec in canonical token form whose values are strings and
    integers, or ``None`` when the general path must decide (it may accept or refuse).

    Canonical means ``Constraint.of(spec).to_dict() == spec``: a set holds no repeated value and
    more than one value unless ``eq`` is also given (``Constraint.of`` rewrites a lone set member
    as ``eq``). Values that are Unicode text or integers with ``|v| < 2**63`` need no other check;
    a string with a lone surrogate is left to the general path, which refuses it (before review
    R55 it was built here, a capability ``from_dict`` refuses and whose one-line form raised).
    """
    if type(spec) is not dict or not spec:
        return None
    fields = _NO_OPERATORS.copy()
    for op, value in spec.items():
        kind = type(value)
        if kind is int:
            if op not in _INTEGER_OPERATORS or not -TOKEN_INTEGER_LIMIT < value < TOKEN_INTEGER_LIMIT:
                return None
            fields[op] = value
        elif kind is str:
            if (op != "eq" and op != "prefix") or not _is_text(value):
                return None
            fields[op] = value
        elif kind is list and op == "in":
            if len(value) > MAX_SET_SIZE:
                return None
            for item in value:
                item_kind = type(item)
                if item_kind is str:
                    if not _is_text(item):
                        return None
                elif item_kind is not int or not -TOKEN_INTEGER_LIMIT < item < TOKEN_INTEGER_LIMIT:
                    return None
            # Strings and integers only, so plain set equality is ``_same``.
            if not value or len(set(value)) != len(value) or (len(value) < 2 and "eq" not in spec):
                return None
            fields["one_of"] = tuple(value)
        else:
            return None
    constraint = object.__new__(Constraint)
    attributes = vars(constraint)
    attributes.update(fields)
    attributes["_normal"] = constraint._normalize()
    return constraint


def capability_from_canonical(data: object) -> Capability | None:
    """The capability of a token's canonical capability object, built without re-validating
    what canonical parsing already guarantees; ``None`` when ``Capability.from_dict`` (and the
    canonical-form check against ``to_dict``) must decide.

    Returns a capability only when ``Capability.from_dict(data)`` would return an equal one and
    its ``to_dict()`` equals ``data``; never raises (a name, a resource or an action that is not
    an exact ``str`` gives ``None``).
    """
    if type(data) is not dict or data.keys() != _CAPABILITY_FIELDS:
        return None
    resource, action, raw = data["resource"], data["action"], data["constraints"]
    if type(resource) is not str or type(action) is not str or type(raw) is not dict:
        return None
    # The checks of ``Capability.__post_init__``, and its order of constraints (by name).
    try:
        _check_pattern(resource)
    except CapabilityError:
        return None
    if len(action) > MAX_NAME_LENGTH or not _ACTION.fullmatch(action):
        return None
    constraints: list[tuple[str, Constraint]] = []
    for name, spec in raw.items():
        constraint = _constraint_from_canonical(spec)
        # An exact ``str`` only: until review R68 a name of another type raised a bare
        # ``TypeError`` here (``len`` of an int), and one of a ``str`` subclass was held as it was.
        if (
            constraint is None
            or type(name) is not str
            or len(name) > MAX_NAME_LENGTH
            or not _FIELD.fullmatch(name)
        ):
            return None
        constraints.append((name, constraint))
    constraints.sort(key=_name)
    return _prechecked(Capability, resource=resource, action=action, constraints=tuple(constraints))
