"""The normal forms of a constraint (empty, a finite set, a numeric interval, a string prefix), and
exact inclusion between them (``_subset``).

``_members`` lists candidate members of a normal form for the witnesses: complete, so that when a
child holds a value its parent refuses, one of the candidates is such a value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeAlias

from agentgate.capabilities._values import MAX_SET_SIZE, Scalar, _is_number, _same


@dataclass(frozen=True)
class _Empty:
    def contains(self, value: object) -> bool:
        return False


_PLAIN_SCALARS = frozenset({str, int, float, bool})


@dataclass(frozen=True)
class _Finite:
    values: tuple[Scalar, ...]

    @cached_property
    def _by_type(self) -> tuple[frozenset[Scalar], frozenset[Scalar]] | None:
        """The string values and the number values, when every value has an exact plain type.

        Then ``_same`` is set membership: a string equals only a string, and a number (never a
        boolean) only a number of equal value, whose hashes agree (``1 == 1.0``).
        """
        if not all(
            type(v) in _PLAIN_SCALARS and (type(v) is not float or math.isfinite(v)) for v in self.values
        ):
            return None
        strings = frozenset(v for v in self.values if type(v) is str)
        return strings, frozenset(v for v in self.values if type(v) is int or type(v) is float)

    def contains(self, value: object) -> bool:
        kind = type(value)
        if kind is str or kind is int or kind is float:
            by_type = self._by_type
            if by_type is not None:
                return value in by_type[0 if kind is str else 1]
        return any(_same(value, v) for v in self.values)


@dataclass(frozen=True)
class _Interval:
    lo: float
    hi: float
    lo_open: bool
    hi_open: bool

    def contains(self, value: object) -> bool:
        # A float needs no finiteness check: NaN fails every comparison, and an infinite bound
        # is always open, so an infinity is never inside.
        if not (type(value) is float or type(value) is int or _is_number(value)):
            return False
        v: Any = value  # Python compares integers and floats exactly, at any size
        above = v > self.lo or (v == self.lo and not self.lo_open)
        below = v < self.hi or (v == self.hi and not self.hi_open)
        return above and below


@dataclass(frozen=True)
class _Prefix:
    prefix: str

    def contains(self, value: object) -> bool:
        return isinstance(value, str) and value.startswith(self.prefix)


_Normal: TypeAlias = _Empty | _Finite | _Interval | _Prefix


def _interval_normal(interval: _Interval) -> _Normal:
    """``interval`` as a normal form: empty when no number lies in it, a single value when it is
    closed on one point (an integral float point as an integer), else the interval itself."""
    if interval.lo > interval.hi or (interval.lo == interval.hi and (interval.lo_open or interval.hi_open)):
        return _Empty()
    if interval.lo == interval.hi:
        lo = interval.lo
        point = lo if type(lo) is int or not float(lo).is_integer() else int(lo)
        return _Finite((point,))
    return interval


def _subset(child: _Normal, parent: _Normal) -> bool:
    """Exact inclusion of one normal form in another."""
    if isinstance(child, _Empty):
        return True
    if isinstance(child, _Finite):
        return all(parent.contains(v) for v in child.values)
    if isinstance(parent, _Empty | _Finite):
        return False  # child is infinite (a non-degenerate interval, or a prefix)
    if isinstance(child, _Interval):
        if not isinstance(parent, _Interval):
            return False
        lo_ok = child.lo > parent.lo or (child.lo == parent.lo and (child.lo_open or not parent.lo_open))
        hi_ok = child.hi < parent.hi or (child.hi == parent.hi and (child.hi_open or not parent.hi_open))
        return lo_ok and hi_ok
    return isinstance(parent, _Prefix) and child.prefix.startswith(parent.prefix)


def _members(normal: _Normal, avoid: _Normal | None) -> Iterable[Scalar]:
    """Candidate members of ``normal``, for witnesses; ones outside ``avoid`` come early.

    Complete: when ``normal`` holds a string, integer or double outside ``avoid``, one of the
    candidates is one (a finite ``avoid`` of n values cannot hold n + 1 distinct candidates).
    """
    if isinstance(normal, _Finite):
        yield from normal.values
    elif isinstance(normal, _Prefix):
        yield normal.prefix
        for suffix in ("\x01", "zz-witness", "0"):
            yield normal.prefix + suffix
        if isinstance(avoid, _Finite):
            for k in range(len(avoid.values) + 1):
                yield f"{normal.prefix}\x01{k}"
    elif isinstance(normal, _Interval):
        lo = normal.lo if math.isfinite(normal.lo) else min(normal.hi, 0.0) - 1e6
        hi = normal.hi if math.isfinite(normal.hi) else max(normal.lo, 0.0) + 1e6
        candidates = [lo, hi, (lo + hi) / 2, math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf)]
        if isinstance(avoid, _Interval):
            for b in (avoid.lo, avoid.hi):
                if math.isfinite(b):
                    candidates += [b, math.nextafter(b, math.inf), math.nextafter(b, -math.inf)]
        if isinstance(avoid, _Finite):  # more distinct points than a finite set can hold
            candidates += [lo + (hi - lo) * k / (MAX_SET_SIZE + 9) for k in range(1, MAX_SET_SIZE + 9)]
        # Beyond 2**53 integers lie between doubles (``gt: 2**60, lt: 2**60 + 2`` holds 2**60 + 1
        # and no double), so the points above may all miss. The integers and doubles nearest each
        # bound, of ``normal`` and of an interval ``avoid``, cannot: the least (or greatest) value
        # of ``normal`` outside ``avoid`` lies next to one of those bounds.
        bounds = [b for b in (normal.lo, normal.hi) if math.isfinite(b)]
        if isinstance(avoid, _Interval):
            bounds += [b for b in (avoid.lo, avoid.hi) if math.isfinite(b)]
        count = len(avoid.values) + 1 if isinstance(avoid, _Finite) else 1
        for b in bounds or [0]:
            candidates += _nearest(b, count)
        for c in candidates:
            yield c if type(c) is int else int(c) if c.is_integer() and abs(c) < 2**53 else c


def _nearest(bound: float, count: int) -> list[float]:
    """``bound`` (as an integer and as a double) and the ``count`` integers and ``count`` doubles
    next to it on each side."""
    base = math.floor(bound)
    below = above = float(bound)
    out: list[float] = [base, below]
    for k in range(1, count + 1):
        below, above = math.nextafter(below, -math.inf), math.nextafter(above, math.inf)
        out += [base - k, base + k, below, above]
    return out
