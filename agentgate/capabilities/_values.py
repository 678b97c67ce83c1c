"""The values the algebra admits, checked where they enter it, and how two of them compare.

A constraint value is a string that is Unicode text, an integer with ``|v| < 2**63``, a finite
float or a boolean; booleans are not numbers (``_same``: ``True`` never equals ``1``). Shared by
the constraints, their normal forms, the one-line form and the token fast path.

Values are held and compared as the exact built-in types (``_plain``): a subclass of ``str``,
``int`` or ``float`` (a ``str`` enum member, or a class written to lie) is read through the base
type's own method, so no check ever runs a method its caller wrote (``startswith``, ``__eq__``,
``__le__``...); an object that only claims to be one (a ``__class__`` property) is no value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

from agentgate._shown import quoted
from agentgate.errors import CapabilityError

if TYPE_CHECKING:
    from agentgate.capabilities._constraints import Constraint

Scalar: TypeAlias = str | int | float | bool
MAX_SET_SIZE = 1000
PLAIN_SCALARS = frozenset({str, int, float, bool})


def _plain(value: object) -> object:
    """``value`` as its exact built-in type when its type is a subclass of ``str``, ``int`` or
    ``float`` (copied by the base type's method, which reads the value itself, never an override);
    any other value as it is. Types, not ``isinstance``: an object whose ``__class__`` claims
    ``str`` is not one. ``bool`` has no subclasses."""
    kind = type(value)
    if kind in PLAIN_SCALARS:
        return value
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, int):
        return int.__int__(value)  # type: ignore[arg-type]
    if issubclass(kind, float):
        return float.__float__(value)  # type: ignore[arg-type]
    return value


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text: no lone surrogate."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(value: str, where: str) -> str:
    """``value``, unless it is not Unicode text (a lone surrogate): no token can carry it, no
    call's arguments holding it can be digested, and the one-line form cannot spell it."""
    if not _is_text(value):
        raise CapabilityError(f"{where}: {quoted(value)} is not valid Unicode text")
    return value


def _text(value: object, what: str) -> str:
    """``value`` as an exact ``str`` if it is a string (``_plain``), else ``CapabilityError`` naming
    ``what`` it was to be (a name is never put through an f-string unchecked: ``None`` would
    become the model ``None``)."""
    if not issubclass(type(value), str):
        raise CapabilityError(f"{what} must be a string, got {type(value).__name__}")
    return str.__str__(value)


TOKEN_INTEGER_LIMIT = 2**63
"""A constraint's integers lie within ``|v| < 2**63``, as a grant token carries them (and a
whole float beyond, ``token_number_refusal``, is no integer a token carries)."""


def _check_value(value: object, where: str) -> Scalar:
    """A scalar the algebra accepts, as its exact built-in type (``_plain``), or ``CapabilityError``."""
    value = _plain(value)
    if type(value) not in PLAIN_SCALARS:
        raise CapabilityError(
            f"{where}: {type(value).__name__} is not a constraint value (string, number, boolean)"
        )
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _check_text(value, where)
    if isinstance(value, int):
        if abs(value) >= TOKEN_INTEGER_LIMIT:
            # An integer past 4,300 digits cannot even be printed (a bare ValueError): say its size.
            shown = value if value.bit_length() <= 256 else f"of {value.bit_length()} bits"
            raise CapabilityError(f"{where}: integer {shown} is out of range (|v| < 2**63)")
        return value
    assert isinstance(value, float)
    if not math.isfinite(value):
        raise CapabilityError(f"{where}: {value} is not a finite number")
    return value


def token_number_refusal(value: Scalar) -> str | None:
    """Why a grant token cannot carry the constraint value ``value``, or ``None`` where it can.
    A token carries its numbers as integers (``|v| < 2**63``), a whole float as the integer it
    is: a float with a fraction (``500.5``) or a whole one out of that range (``1e+19``) is
    refused, named as written (its ``repr``), never as the integer it would have become. What
    ``issue`` refuses, and the lint rule ``role_grant_not_issuable`` reports in a role's rules."""
    if type(value) is not float:
        return None
    if not value.is_integer():
        return f"{value!r} is not an integer; tokens carry integers only (use minor units)"
    if abs(value) >= TOKEN_INTEGER_LIMIT:
        return f"{value!r} is out of range for a token (|v| < 2**63)"
    return None


def token_refusal(constraint: Constraint) -> str | None:
    """Why no grant token can carry ``constraint`` (``token_number_refusal`` of the first of its
    values, its bounds, its ``eq`` and each member of its ``in``, that none carries), or ``None``.
    What the lint rule ``role_grant_not_issuable`` reports and ``grant issue --allow`` refuses."""
    for op, value in constraint.to_dict().items():
        for v in value if op == "in" else (value,):
            why = token_number_refusal(v)
            if why is not None:
                return why
    return None


def _is_number(value: object) -> bool:
    """A finite real: an integer (of any size; never a boolean) or a finite float."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _same(a: object, b: object) -> bool:
    """Equality that keeps booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _value_key(value: Scalar) -> tuple[str, Scalar]:
    """A key whose equality and hash are ``_same`` for held values (the exact plain types): the
    value tagged with its kind, so that ``True`` and ``1`` differ and ``1`` and ``1.0`` agree (a
    number's hash agrees with its equality across ``int`` and ``float``)."""
    kind = type(value)
    return ("b" if kind is bool else "s" if kind is str else "n", value)


def _distinct(raw: Iterable[object], where: str) -> tuple[Scalar, ...]:
    """The checked values of ``raw`` in order, each kept once (``_same``: ``1`` and ``1.0`` are one
    value, ``True`` and ``1`` two).

    Linear: checked values have the plain types, told apart by a key whose equality is ``_same``
    (a number's hash agrees with its equality across ``int`` and ``float``). Comparing every
    value with every other took 0.5 s for a 1,000-value set with a boolean in it, and a token of
    a few such sets is parsed before any signature is checked.
    """
    values: list[Scalar] = []
    keys: set[tuple[str, Scalar]] = set()
    for v in raw:
        checked = _check_value(v, where)
        key = _value_key(checked)
        if key not in keys:
            keys.add(key)
            values.append(checked)
    return tuple(values)
