"""The capability and constraint algebra: the one vocabulary that policies and grants speak.

A capability is a resource pattern, an action and constraints on the call's arguments::

    tool:payments.refund  invoke  {amount: {le: 500}, currency: {in: [EUR, USD]}}

Constraints are a small closed algebra over one argument each: ``eq``, ``in`` (one-of), the
numeric bounds ``lt``/``le``/``gt``/``ge``, and string ``prefix``; the operators given for one
field are a conjunction, and so are the fields. Because the algebra is closed and small, every
conjunction has a normal form (empty, a finite set, a numeric interval, or a string prefix),
and inclusion between normal forms is decidable exactly. That is what makes scope creep
*detectable*: ``attenuates(parent, child)`` is exact, and when it is false ``witness`` returns a
concrete call that the child allows and the parent does not.

Numbers are the reals: ``amount <= 500`` admits 499.5, so an interval is never a subset of a
finite set unless it is a single point. Booleans are not numbers (``True`` never equals ``1``).
NaN and infinities, and strings that are not Unicode text (a lone surrogate), are refused
wherever a value enters the algebra.

Resource names are canonical or refused, never guessed: a tool name is lower-case ASCII
segments (``[a-z0-9_-]``) joined by dots, so ``Run_Shell``, `` run_shell``, ``run_shell\\n``,
a zero-width or look-alike character, or ``../`` is a ``CapabilityError`` (the caller denies).
Model names may also use upper case, ``/`` and ``:`` (``model:Qwen/Qwen3-32B``), matched exactly.
A pattern ending in ``.*`` matches one or more further segments; ``tool:*`` matches every tool.
"""

from __future__ import annotations

import math
import operator
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias, TypeVar

from agentgate.errors import CapabilityError

Scalar: TypeAlias = str | int | float | bool
RESOURCE_KINDS = ("tool", "model", "gpu")
DEFAULT_ACTIONS = {"tool": "invoke", "model": "generate", "gpu": "lease"}
OPERATORS = ("eq", "in", "lt", "le", "gt", "ge", "prefix")

_TOOL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)*")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:[./:][A-Za-z0-9][A-Za-z0-9_-]*)*")
_ACTION = re.compile(r"[a-z][a-z0-9_]*|\*")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAME_LENGTH = 200
MAX_SET_SIZE = 1000


# --- values -----------------------------------------------------------------------------------


def _check_text(value: str, where: str) -> str:
    """``value``, unless it is not Unicode text (a lone surrogate): no token can carry it, no
    call's arguments holding it can be digested, and the one-line form cannot spell it."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CapabilityError(f"{where}: {value!r} is not valid Unicode text") from None
    return value


def _text(value: object, what: str) -> str:
    """``value`` if it is a string, else ``CapabilityError`` naming ``what`` it was to be (a name
    is never put through an f-string unchecked: ``None`` would become the model ``None``)."""
    if not isinstance(value, str):
        raise CapabilityError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _check_value(value: object, where: str) -> Scalar:
    """A scalar the algebra accepts, or ``CapabilityError``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _check_text(value, where)
    if isinstance(value, int):
        if abs(value) >= 2**63:
            # An integer past 4,300 digits cannot even be printed (a bare ValueError): say its size.
            shown = value if value.bit_length() <= 256 else f"of {value.bit_length()} bits"
            raise CapabilityError(f"{where}: integer {shown} is out of range (|v| < 2**63)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CapabilityError(f"{where}: {value} is not a finite number")
        return value
    raise CapabilityError(
        f"{where}: {type(value).__name__} is not a constraint value (string, number, boolean)"
    )


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


def _distinct(raw: Iterable[object], where: str) -> tuple[Scalar, ...]:
    """The checked values of ``raw`` in order, each kept once (``_same``: ``1`` and ``1.0`` are one
    value, ``True`` and ``1`` two).

    Linear: values of the plain types are told apart by a key whose equality is ``_same`` (a
    number's hash agrees with its equality across ``int`` and ``float``); only a value of another
    type (a subclass, from a Python caller) is compared one by one. A 1,000-value set with a
    boolean in it took 0.5 s this way before (every value compared with every other), and a token
    of a few such sets is parsed before any signature is checked.
    """
    values: list[Scalar] = []
    keys: set[tuple[str, Scalar]] = set()
    others: list[Scalar] = []  # values of a type other than the plain four
    for v in raw:
        checked = _check_value(v, where)
        kind = type(checked)
        if kind is bool:
            key: tuple[str, Scalar] | None = ("b", checked)
        elif kind is int or kind is float:
            key = ("n", checked)
        elif kind is str:
            key = ("s", checked)
        else:
            key = None
        if key is None:
            if any(_same(checked, seen) for seen in values):
                continue
            others.append(checked)
        else:
            if key in keys or any(_same(checked, other) for other in others):
                continue
            keys.add(key)
        values.append(checked)
    return tuple(values)


# --- normal forms -------------------------------------------------------------------------------


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


# --- constraints ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint:
    """A conjunction of operators on one argument. Immutable; build with ``Constraint.of``."""

    eq: Scalar | None = None
    one_of: tuple[Scalar, ...] | None = None
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    prefix: str | None = None
    _normal: _Normal = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_normal", self._normalize())

    @classmethod
    def of(cls, spec: Mapping[str, Any], where: str = "constraint") -> Constraint:
        """From the mapping form ``{"le": 500, "in": ["EUR"]}``; refuses unknown operators and bad values."""
        if not isinstance(spec, Mapping) or not spec:
            raise CapabilityError(f"{where}: expected a non-empty mapping of operators {OPERATORS}")
        kwargs: dict[str, Any] = {}
        for op, raw in spec.items():
            if op not in OPERATORS:
                raise CapabilityError(f"{where}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
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
                    raise CapabilityError(f"{where}: {op!r} takes a number, got {raw!r}")
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
        return self._normal.contains(value)

    def __str__(self) -> str:
        return "&".join(f"{op}:{v}" for op, v in self.to_dict().items())


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


# --- resources --------------------------------------------------------------------------------


def canonical_resource(resource: str) -> str:
    """Return ``resource`` if it is canonical (``kind:name``), else raise ``CapabilityError``.

    Nothing is normalized silently: a name that differs from its canonical form in case,
    whitespace, Unicode or path syntax is ambiguous, and ambiguity is refused.
    """
    if not isinstance(resource, str):
        raise CapabilityError(f"resource must be a string, got {type(resource).__name__}")
    if len(resource) > MAX_NAME_LENGTH:
        raise CapabilityError(f"resource name longer than {MAX_NAME_LENGTH} characters")
    kind, sep, name = resource.partition(":")
    if not sep or kind not in RESOURCE_KINDS:
        raise CapabilityError(
            f"resource {resource!r} must start with one of {', '.join(k + ':' for k in RESOURCE_KINDS)}"
        )
    grammar = _MODEL_NAME if kind == "model" else _TOOL_NAME
    if not grammar.fullmatch(name):
        raise CapabilityError(
            f"resource name {name!r} is not canonical for {kind}: "
            + (
                "letters, digits, '_', '-', joined by '.', '/' or ':'"
                if kind == "model"
                else "lower-case ASCII letters, digits, '_' and '-', joined by '.'"
            )
        )
    return resource


def _check_pattern(pattern: str) -> str:
    if pattern.endswith(":*"):
        kind = pattern[:-2]
        if kind not in RESOURCE_KINDS:
            raise CapabilityError(f"resource pattern {pattern!r}: unknown kind {kind!r}")
        return pattern
    if pattern.endswith(".*"):
        canonical_resource(pattern[:-2])
        return pattern
    return canonical_resource(pattern)


def pattern_matches(pattern: str, resource: str) -> bool:
    """Whether a canonical ``resource`` is named by ``pattern`` (exact, ``kind:*`` or ``prefix.*``)."""
    if pattern.endswith(":*"):
        return resource.startswith(pattern[:-1]) and len(resource) > len(pattern) - 1
    if pattern.endswith(".*"):
        return resource.startswith(pattern[:-1]) and len(resource) > len(pattern) - 1
    return resource == pattern


def pattern_within(child: str, parent: str) -> bool:
    """Exact: every resource named by ``child`` is named by ``parent``."""
    if child == parent:
        return True
    if child.endswith((":*", ".*")):
        # a wildcard child is within a wildcard parent whose stem it extends
        if not parent.endswith((":*", ".*")):
            return False
        return child[:-1].startswith(parent[:-1])
    return pattern_matches(parent, child)


def _pattern_witness(child: str, parent: str) -> str:
    """A resource named by ``child``, preferably one that ``parent`` does not name."""
    if not child.endswith((":*", ".*")):
        return child
    for suffix in ("zz-witness", "zz-other.zz", "0"):
        if not pattern_matches(parent, child[:-1] + suffix):
            return child[:-1] + suffix
    return child[:-1] + "zz-witness"


# --- capabilities ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A concrete call: a resource, an action, and its arguments.

    Refuses (``CapabilityError``) a resource or action that is not a string and arguments that
    are not a mapping: ``Call("model:m", {...})`` puts the arguments where the action goes, and
    a capability for every action (``*``) would otherwise allow it with no arguments at all.
    The resource name is checked where the call is decided, which denies a non-canonical one.
    """

    resource: str
    action: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.resource, str) or not isinstance(self.action, str):
            raise CapabilityError(
                f"a call's resource and action are strings, got {type(self.resource).__name__} and "
                f"{type(self.action).__name__}: Call(resource, action, args)"
            )
        if type(self.args) is not dict and not isinstance(self.args, Mapping):
            raise CapabilityError(f"a call's arguments are a mapping, got {type(self.args).__name__}")

    @classmethod
    def tool(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("tool:" + _text(name, "a tool name")), "invoke", _arguments(args))

    @classmethod
    def model(cls, name: str, args: Mapping[str, Any] | None = None) -> Call:
        return cls(canonical_resource("model:" + _text(name, "a model name")), "generate", _arguments(args))


def _arguments(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``args`` (``None``: no arguments); refuses what is not a mapping, such as a list
    of pairs, which ``dict`` would quietly turn into one."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise CapabilityError(f"a call's arguments are a mapping, got {type(args).__name__}")
    return dict(args)


@dataclass(frozen=True)
class Capability:
    """A resource pattern, an action (or ``*``), and per-argument constraints (a conjunction)."""

    resource: str
    action: str
    constraints: tuple[tuple[str, Constraint], ...] = ()

    def __post_init__(self) -> None:
        _check_pattern(_text(self.resource, "a capability's resource"))
        if not _ACTION.fullmatch(_text(self.action, "a capability's action")):
            raise CapabilityError(f"action {self.action!r} is not a lower-case identifier or '*'")
        constraints = self.constraints
        if not isinstance(constraints, tuple | list):
            raise CapabilityError(
                f"{self.resource}: constraints are (name, Constraint) pairs, got {type(constraints).__name__}; "
                "Capability.of takes the mapping form"
            )
        for pair in constraints:
            if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[1], Constraint)):
                raise CapabilityError(
                    f"{self.resource}: constraints are (name, Constraint) pairs, got {repr(pair)[:80]}"
                )
        names = [name for name, _ in constraints]
        if len(set(names)) != len(names):
            raise CapabilityError(f"{self.resource}: an argument is constrained twice; merge the operators")
        for name in names:
            if not isinstance(name, str) or not _FIELD.fullmatch(name):
                raise CapabilityError(f"{self.resource}: argument name {name!r} is not an identifier")
        object.__setattr__(self, "constraints", tuple(sorted(self.constraints, key=lambda c: c[0])))

    @classmethod
    def of(
        cls,
        resource: str,
        action: str | None = None,
        constraints: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Capability:
        """Build from plain values; the action defaults to the resource kind's (``invoke`` for tools)."""
        kind = _text(resource, "a capability's resource").partition(":")[0]
        if constraints is None:
            constraints = {}
        elif not isinstance(constraints, Mapping):
            raise CapabilityError(
                f"{resource}: constraints are a mapping of argument names to operators, "
                f"got {type(constraints).__name__}"
            )
        return cls(
            resource,
            DEFAULT_ACTIONS.get(kind, "invoke") if action is None else action,
            tuple((name, Constraint.of(spec, f"{resource} {name}")) for name, spec in constraints.items()),
        )

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Parse the one-line form ``RESOURCE[#ACTION][?FIELD OP VALUE(&...)]`` (docs/cli.md)."""
        return parse_capability(text)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Capability:
        if not isinstance(data, Mapping) or set(data) - {"resource", "action", "constraints"}:
            raise CapabilityError("a capability has exactly the fields resource, action, constraints")
        resource, action = data.get("resource"), data.get("action")
        constraints = data.get("constraints", {})
        if (
            not isinstance(resource, str)
            or not isinstance(action, str)
            or not isinstance(constraints, Mapping)
        ):
            raise CapabilityError("capability resource and action must be strings, constraints a mapping")
        return cls.of(resource, action, constraints)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "action": self.action,
            "constraints": {name: c.to_dict() for name, c in self.constraints},
        }

    @property
    def constraint_map(self) -> dict[str, Constraint]:
        return dict(self.constraints)

    def __str__(self) -> str:
        return format_capability(self)


_T = TypeVar("_T")


def _prechecked(cls: type[_T], **fields: Any) -> _T:
    """An instance of the frozen dataclass ``cls`` with ``fields`` set as they are, without
    running ``__init__``/``__post_init__``: only for values whose checks the caller has done."""
    obj = object.__new__(cls)
    vars(obj).update(fields)
    return obj


_INT_LIMIT = 2**63
_name = operator.itemgetter(0)
_CAPABILITY_FIELDS = frozenset({"resource", "action", "constraints"})


_NO_OPERATORS: dict[str, Any] = dict.fromkeys(("eq", "one_of", "lt", "le", "gt", "ge", "prefix"))
_INTEGER_OPERATORS = frozenset({"eq", "lt", "le", "gt", "ge"})


def _constraint_from_canonical(spec: object) -> Constraint | None:
    """``Constraint.of(spec)`` for a spec in canonical token form whose values are strings and
    integers, or ``None`` when the general path must decide (it may accept or refuse).

    Canonical means ``Constraint.of(spec).to_dict() == spec``: a set holds no repeated value and
    more than one value unless ``eq`` is also given (``Constraint.of`` rewrites a lone set member
    as ``eq``). Values that are strings or integers with ``|v| < 2**63`` need no other check.
    """
    if type(spec) is not dict or not spec:
        return None
    fields = _NO_OPERATORS.copy()
    for op, value in spec.items():
        kind = type(value)
        if kind is int:
            if op not in _INTEGER_OPERATORS or not -_INT_LIMIT < value < _INT_LIMIT:
                return None
            fields[op] = value
        elif kind is str:
            if op != "eq" and op != "prefix":
                return None
            fields[op] = value
        elif kind is list and op == "in":
            if len(value) > MAX_SET_SIZE:
                return None
            for item in value:
                item_kind = type(item)
                if item_kind is not str and (item_kind is not int or not -_INT_LIMIT < item < _INT_LIMIT):
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
    its ``to_dict()`` equals ``data``; never raises.
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
    if not _ACTION.fullmatch(action):
        return None
    constraints: list[tuple[str, Constraint]] = []
    for name, spec in raw.items():
        constraint = _constraint_from_canonical(spec)
        if constraint is None or not _FIELD.fullmatch(name):
            return None
        constraints.append((name, constraint))
    constraints.sort(key=_name)
    return _prechecked(Capability, resource=resource, action=action, constraints=tuple(constraints))


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

    Decided on the normal forms directly (no witness is built); agrees with ``witness``.
    A child field left unconstrained where the parent constrains it is wider, since every
    constraint refuses some value.

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


# --- the one-line form ------------------------------------------------------------------------------

_CLAUSE = re.compile(r"(?P<field>[A-Za-z_][A-Za-z0-9_.]*)(?P<op><=|>=|\^=|=|<|>)(?P<value>.*)", re.S)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _parse_text(text: str, where: str) -> str:
    """A string as written in a clause: ``"..."`` or bare, percent-decoded.

    Refuses what a user did not mean literally: an empty bare value (an unfinished clause or
    alternative; the empty string is ``""``), a ``"`` that does not enclose the whole value, a
    ``%`` that starts no escape, and escapes that are not UTF-8 (never replaced by U+FFFD).
    """
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    elif not text:
        raise CapabilityError(f'{where}: empty value (the empty string is written "")')
    if '"' in text:
        raise CapabilityError(f"{where}: '\"' encloses a whole value; percent-encode it inside one (%22)")
    if _BAD_ESCAPE.search(text):
        raise CapabilityError(f"{where}: '%' starts a %XX escape (hex); write '%' as %25")
    try:
        return urllib.parse.unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise CapabilityError(f"{where}: percent-escapes must spell UTF-8 text") from None


def _parse_scalar(text: str, where: str) -> Scalar:
    if text in ("true", "false"):
        return text == "true"
    if _NUMBER.fullmatch(text):
        number = float(text) if any(c in text for c in ".eE") else int(text)
        return _check_value(number, "value")
    return _parse_text(text, where)


def parse_capability(text: str) -> Capability:
    """Parse ``tool:payments.refund?amount<=500&currency=EUR|USD``.

    Grammar: ``RESOURCE [ "#" ACTION ] [ "?" CLAUSE ( "&" CLAUSE )* ]`` where a clause is
    ``FIELD=V`` (equals), ``FIELD=V1|V2`` (one of), ``FIELD<N``, ``<=``, ``>``, ``>=``, or
    ``FIELD^=PREFIX``. Values that look like numbers are numbers, ``true``/``false`` are
    booleans; quote with ``"..."`` to force a string; percent-encode ``&``, ``|``, ``"``, ``%``.
    Several clauses on one field are a conjunction.

    Raises ``CapabilityError`` for anything outside the grammar rather than guess: an empty
    action or clause list (``tool:x#``, ``tool:x?``), an empty value or alternative (``a=``,
    ``a=1|``: the empty string is ``""``), an empty prefix (``a^=``, which would match every
    string: ``a^=""`` says so), an equals value starting with ``=``, ``<`` or ``>`` (``a==1``,
    ``a=<5``: a misspelled operator; quote or escape such a value), a stray ``"`` and a ``%``
    that is not a UTF-8 percent-escape.
    """
    if not isinstance(text, str) or not text or len(text) > 4096:
        raise CapabilityError("a capability is a non-empty string of at most 4096 characters")
    head, has_query, query = text.partition("?")
    resource, has_action, action = head.partition("#")
    if has_action and not action:
        raise CapabilityError(f"capability {text!r}: '#' with no action after it")
    ops: dict[str, dict[str, Any]] = {}
    for clause in query.split("&") if has_query else ():
        match = _CLAUSE.fullmatch(clause)
        if not match:
            raise CapabilityError(f"capability {text!r}: cannot read clause {clause!r} (FIELD OP VALUE)")
        name, op, raw = match["field"], match["op"], match["value"]
        where = f"capability {text!r}: clause {clause!r}"
        spec = ops.setdefault(name, {})
        if op == "=":
            if raw[:1] in ("=", "<", ">"):
                raise CapabilityError(
                    f"{where}: '={raw[0]}' is not an operator (use "
                    "=, <, <=, >, >=, ^=); quote a value that starts with it"
                )
            values = [_parse_scalar(v, where) for v in raw.split("|")]
            key, value = ("eq", values[0]) if len(values) == 1 else ("in", values)
        elif op == "^=":
            if not raw:
                raise CapabilityError(
                    f'{where}: an empty prefix matches every string; write ^="" if that is meant'
                )
            key, value = "prefix", _parse_text(raw, where)
        else:
            key = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[op]
            value = _parse_scalar(raw, where)
        if key in spec:
            raise CapabilityError(f"capability {text!r}: {name} {op} given twice")
        spec[key] = value
    kind = resource.partition(":")[0]
    return Capability.of(resource, action or DEFAULT_ACTIONS.get(kind), ops)


def _format_scalar(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    quoted = urllib.parse.quote(value, safe="")
    plain = (
        value != "" and not _NUMBER.fullmatch(value) and value not in ("true", "false") and quoted == value
    )
    return value if plain else f'"{quoted}"'


def format_capability(cap: Capability) -> str:
    """The one-line form; ``parse_capability(format_capability(c)) == c``."""
    kind = cap.resource.partition(":")[0]
    text = cap.resource + ("" if cap.action == DEFAULT_ACTIONS.get(kind) else f"#{cap.action}")
    clauses: list[str] = []
    symbols: dict[str, str] = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    for name, c in cap.constraints:
        for op, value in c.to_dict().items():
            if op == "eq":
                clauses.append(f"{name}={_format_scalar(value)}")
            elif op == "in":
                values = value if len(value) > 1 else value * 2  # `a=x|x` keeps a one-value set a set
                clauses.append(f"{name}=" + "|".join(_format_scalar(v) for v in values))
            elif op == "prefix":
                clauses.append(f"{name}^=" + (urllib.parse.quote(value, safe="") or '""'))
            else:
                clauses.append(f"{name}{symbols[op]}{_format_scalar(value)}")
    return text + ("?" + "&".join(clauses) if clauses else "")


__all__ = [
    "DEFAULT_ACTIONS",
    "Call",
    "Capability",
    "Constraint",
    "attenuates",
    "canonical_resource",
    "covers",
    "format_capability",
    "intersects",
    "parse_capability",
    "pattern_matches",
    "pattern_within",
    "witness",
]
