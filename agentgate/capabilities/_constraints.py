"""``Constraint``: a conjunction of operators on one argument, held with its normal form; and
``intersects``, whether two constraints have a value in common.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate._shown import quoted
from agentgate.capabilities._normal_forms import (
    _Empty,
    _Finite,
    _Interval,
    _interval_normal,
    _Normal,
    _Prefix,
)
from agentgate.capabilities._values import (
    MAX_SET_SIZE,
    PLAIN_SCALARS,
    TOKEN_INTEGER_LIMIT,
    Scalar,
    _check_text,
    _check_value,
    _distinct,
    _is_number,
    _plain,
    _same,
    _value_key,
)
from agentgate.errors import CapabilityError

OPERATORS = ("eq", "in", "lt", "le", "gt", "ge", "prefix")


@dataclass(frozen=True, eq=False)
class Constraint:
    """A conjunction of operators on one argument. Immutable; build with ``Constraint.of``.

    Two constraints are equal when they give the same operators the same values as the algebra
    compares values (``_same``): ``1`` and ``1.0`` are one value, a boolean is never a number.
    Until review R66 equality and hash were the dataclass's, Python's, where ``True == 1``:
    ``x = true`` equalled ``x = 1``, so a set or a dict of capabilities, or a cache keyed by one,
    gave the one for the other though they allow different calls."""

    eq: Scalar | None = None
    one_of: tuple[Scalar, ...] | None = None
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    prefix: str | None = None
    _normal: _Normal = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_fields()
        object.__setattr__(self, "_normal", self._normalize())

    def _check_fields(self) -> None:
        """Refuse (``CapabilityError``) what ``of`` refuses, also in a ``Constraint`` built
        directly, and hold each value as its exact built-in type (``_plain``). Until review R53
        only ``of`` checked: ``Constraint(le=x)`` kept an ``int`` subclass whose own comparison
        then decided (Python asks a right operand's reflected method first when its type
        subclasses the left's), so it could allow any amount; no operator at all was an
        ``AssertionError``. Integers are bounded as ``of`` and tokens bound them (``|v| < 2**63``):
        until review R55 ``Constraint(le=10**5000)`` was held, and printing it was a bare
        ``ValueError`` (Python's limit on the digits of an integer it prints). A set is held as
        ``of`` holds it, each value once and a lone value (with no ``eq``) as ``eq``: until review
        R64 ``Constraint(one_of=("EUR",))`` differed from the equal ``Constraint.of``, did not
        round-trip through the one-line form, and ``issue`` refused it as not canonical."""
        where = "Constraint"
        given = (("eq", self.eq), ("lt", self.lt), ("le", self.le), ("gt", self.gt), ("ge", self.ge))
        if self.one_of is None and self.prefix is None and all(value is None for _, value in given):
            raise CapabilityError(f"{where}: no operator given; use one of {', '.join(OPERATORS)}")
        for op, value in (*given, ("prefix", self.prefix)):
            if value is None:
                continue
            held = _held(value, where)
            if op == "prefix" and type(held) is not str:
                raise CapabilityError(f"{where}: 'prefix' takes a string")
            if op not in ("eq", "prefix") and not _is_number(held):
                raise CapabilityError(f"{where}: {op!r} takes a number, got {quoted(held)}")
            if held is not value:
                object.__setattr__(self, op, held)
        one_of = self.one_of
        if one_of is not None:
            if type(one_of) is not tuple or not one_of or len(one_of) > MAX_SET_SIZE:
                raise CapabilityError(
                    f"{where}: 'one_of' takes a non-empty tuple of at most {MAX_SET_SIZE} values"
                )
            # No two held values equal as Python compares them: none is a repeat (``_same`` implies ``==``).
            if all(_held(v, where) is v for v in one_of) and len(set(one_of)) == len(one_of):
                distinct = one_of
            else:
                distinct = _distinct(one_of, where)
                object.__setattr__(self, "one_of", distinct)
            if self.eq is None and len(distinct) == 1:
                object.__setattr__(self, "eq", distinct[0])  # as ``of`` spells a single value
                object.__setattr__(self, "one_of", None)

    @classmethod
    def of(cls, spec: Mapping[str, Any], where: str = "constraint") -> Constraint:
        """From the mapping form ``{"le": 500, "in": ["EUR"]}``; refuses unknown operators and bad values."""
        if not isinstance(spec, Mapping) or not spec:
            raise CapabilityError(f"{where}: expected a non-empty mapping of operators {OPERATORS}")
        kwargs: dict[str, Any] = {}
        for op, raw in spec.items():
            if op not in OPERATORS:
                raise CapabilityError(
                    f"{where}: unknown operator {quoted(op)}; use one of {', '.join(OPERATORS)}"
                )
            if op == "in":
                if not isinstance(raw, list | tuple) or not raw or len(raw) > MAX_SET_SIZE:
                    raise CapabilityError(
                        f"{where}: 'in' takes a non-empty list of at most {MAX_SET_SIZE} values"
                    )
                kwargs["one_of"] = _distinct(raw, where)
            elif op == "eq":
                kwargs["eq"] = _check_value(raw, where)
            elif op == "prefix":
                if not isinstance(raw, str):
                    raise CapabilityError(f"{where}: 'prefix' takes a string")
                kwargs["prefix"] = _check_text(raw, where)
            else:
                value = _check_value(raw, where)
                if not _is_number(value):
                    raise CapabilityError(f"{where}: {op!r} takes a number, got {quoted(value)}")
                kwargs[op] = value
        if "eq" not in kwargs and len(kwargs.get("one_of", ())) == 1:
            kwargs["eq"] = kwargs.pop("one_of")[0]  # one canonical spelling of a single value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The mapping form, operators in a fixed order; inverse of ``of``."""
        out: dict[str, Any] = {}
        if self.eq is not None:
            out["eq"] = self.eq
        if self.one_of is not None:
            out["in"] = list(self.one_of)
        for op in ("lt", "le", "gt", "ge"):
            bound = getattr(self, op)
            if bound is not None:
                out[op] = bound
        if self.prefix is not None:
            out["prefix"] = self.prefix
        return out

    def _normalize(self) -> _Normal:
        # The shapes grants and policies use most (one value, one set, one integer bound) are
        # built directly; each gives exactly what the general computation below gives for it.
        eq, one_of, le = self.eq, self.one_of, self.le
        if self.prefix is None and self.lt is None and self.gt is None and self.ge is None:
            if le is None:
                if one_of is None and eq is not None:
                    return _Finite((eq,))
                if eq is None and one_of:
                    return _Finite(tuple(one_of))
            elif eq is None and one_of is None and type(le) is int:
                return _Interval(-math.inf, le, True, False)
        finite: list[Scalar] | None = None
        if self.eq is not None:
            finite = [self.eq]
        if self.one_of is not None:
            finite = [v for v in self.one_of if finite is None or any(_same(v, f) for f in finite)]
        interval = self._bounds()
        prefix = _Prefix(self.prefix) if self.prefix is not None else None
        if finite is not None:
            kept = tuple(
                v
                for v in finite
                if (interval is None or interval.contains(v)) and (prefix is None or prefix.contains(v))
            )
            return _Finite(kept) if kept else _Empty()
        if interval is not None and prefix is not None:
            return _Empty()  # a value cannot be both a number and a string
        if interval is not None:
            return _interval_normal(interval)
        assert prefix is not None  # Constraint.of refuses an empty spec
        return prefix

    def _bounds(self) -> _Interval | None:
        """The tightest interval the numeric bounds (``gt``, ``ge``, ``lt``, ``le``) allow, or
        ``None`` when there is none."""
        lo, lo_open, hi, hi_open = -math.inf, True, math.inf, True
        bounded = False
        for bound, is_lower, is_open in (
            (self.gt, True, True),
            (self.ge, True, False),
            (self.lt, False, True),
            (self.le, False, False),
        ):
            if bound is None:
                continue
            bounded = True
            b = bound  # an integer bound stays an integer: compared exactly, also beyond 2**53
            if is_lower and (b > lo or (b == lo and is_open)):
                lo, lo_open = b, is_open
            if not is_lower and (b < hi or (b == hi and is_open)):
                hi, hi_open = b, is_open
        return _Interval(lo, hi, lo_open, hi_open) if bounded else None

    @property
    def is_empty(self) -> bool:
        """True when no value satisfies it (a contradictory conjunction)."""
        return isinstance(self._normal, _Empty)

    def allows(self, value: object) -> bool:
        """Whether ``value`` satisfies every operator. Decided on the exact built-in value
        (``_plain``): a ``str``, ``int`` or ``float`` subclass's own methods are never called, and
        a value of any other type (an object whose ``__class__`` claims ``str``) is refused."""
        kind = type(value)
        if kind is not str and kind is not int and kind is not float and kind is not bool:
            value = _plain(value)
            if type(value) not in PLAIN_SCALARS:
                return False
        return self._normal.contains(value)

    def __str__(self) -> str:
        return "&".join(f"{op}:{v}" for op, v in self.to_dict().items())

    def _key(self) -> tuple[object, ...]:
        """The fields, each value tagged with its kind (``_value_key``): equal keys, equal constraints."""
        eq, one_of = self.eq, self.one_of
        return (
            None if eq is None else _value_key(eq),
            None if one_of is None else tuple(map(_value_key, one_of)),
            self.lt,
            self.le,
            self.gt,
            self.ge,
            self.prefix,
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        # The fields as they are: values equal by kind are equal in Python, so their hashes agree
        # (``True`` and ``1`` share one too, and ``__eq__`` tells them apart).
        return hash((self.eq, self.one_of, self.lt, self.le, self.gt, self.ge, self.prefix))


def _held(value: object, where: str) -> Scalar:
    """``value`` itself when it is already a value ``of`` would hold as it is (an exact built-in
    scalar: Unicode text, an integer within range, a finite float), else ``_check_value``'s plain copy of it, or its
    ``CapabilityError``. The first test is the common case, and costs a type lookup."""
    kind = type(value)
    if kind is bool or (kind is int and -TOKEN_INTEGER_LIMIT < value < TOKEN_INTEGER_LIMIT):  # type: ignore[operator]
        return value  # type: ignore[return-value]
    if kind is str and str.isascii(value):  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    return _check_value(value, where)


def intersects(a: Constraint, b: Constraint) -> bool:
    """Exact: whether some value satisfies both ``a`` and ``b`` (numbers are the reals).

    Decided on the normal forms: a finite set meets what holds one of its values, two intervals
    meet where the tighter bounds leave room, two prefixes when one extends the other, and an
    interval never meets a prefix (no value is both a number and a string).
    """
    x, y = a._normal, b._normal
    if isinstance(y, _Finite):
        x, y = y, x
    if isinstance(x, _Empty) or isinstance(y, _Empty):
        return False
    if isinstance(x, _Finite):
        return any(y.contains(v) for v in x.values)
    if isinstance(x, _Interval) and isinstance(y, _Interval):
        # The tighter bound; at an equal value an open bound is the tighter one.
        lo, lo_open = max((x.lo, x.lo_open), (y.lo, y.lo_open))
        hi, hi_closed = min((x.hi, not x.hi_open), (y.hi, not y.hi_open))
        return lo < hi or (lo == hi and not lo_open and hi_closed)
    if isinstance(x, _Prefix) and isinstance(y, _Prefix):
        return x.prefix.startswith(y.prefix) or y.prefix.startswith(x.prefix)
    return False
