"""Plain, frozen configuration values for the scheduler.

The policy's ``tools`` section maps onto these one to one (``RetryPolicy``, ``RateLimit``,
``ToolLimits``, ``PriorityClass``); ``SchedulerConfig`` adds the limits that are not per tool.
Every value is checked when it is built, so a scheduler never starts with a limit that cannot
hold: a zero concurrency, a negative rate, a NaN or infinite duration, a ``True`` where a count
belongs, a string where a flag belongs, a repeated or empty name; those raise ``InputError``
naming the field and the value, quoted as ``quoted`` quotes it (until review R86c its whole
``repr``: a bare ``ValueError`` for an integer past 4,300 digits, 10 MB of message for 10 MB of
text). Error class names (``retry_on``, ``trip_on``) are checked for
their form here and against the classifier's classes when a scheduler is made
(``SchedulerConfig.check_error_classes``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NoReturn

from agentgate._shown import quoted
from agentgate._weights import MAX_WEIGHT as MAX_WEIGHT
from agentgate.errors import InputError
from agentgate.store._base import MAX_STORED_INTEGER
from agentgate.tasks._call import OTHER, require_flag

#: The error classes every classifier may return (docs/tasks.md): ``transient``, ``timeout``,
#: ``connection``, ``error``. A classifier that returns others declares them (``Classifier.classes``).
ERROR_CLASSES = frozenset({"transient", "timeout", "connection", "error"})

#: The one error class known to come before any effect: the only one retried for a tool that is
#: neither idempotent nor deduplicating by key. Every other class, a custom one too, is ambiguous.
SAFE_CLASS = "transient"

#: The built-in error classes that leave it unknown whether the tool's effect happened
#: (docs/tasks.md): every class but ``transient`` (a failure known to come before any effect);
#: custom classes are ambiguous as well (``Failure.ambiguous``). ``error`` is among them:
#: a tool may raise after its effect (a payment service's 500 after the charge, a response that
#: does not parse), so listing it in ``retry_on`` repeats only tools that are safe to repeat.
AMBIGUOUS_CLASSES = frozenset({"timeout", "connection", "error"})


MAX_BURST = 2**53
"""Largest token bucket: buckets count tokens in floats, which hold integers exactly up to 2**53
(a larger burst overflowed converting to float when the first call came)."""


MAX_BACKOFF_S = 86_400.0
"""Longest backoff a ``RetryPolicy`` takes, one day: a retry waits with every slot released and
nothing to show for it, and a call without a deadline waited the whole backoff (a cap of 1e308 s
was taken, and such a call never came back). Work retried a day later belongs to a job queue."""

MAX_RESET_TIMEOUT_S = 86_400.0
"""Longest time a ``BreakerPolicy`` keeps a breaker open before a probe, one day, as for a
backoff: ``CircuitOpen`` says when to retry, and an open breaker of 1e300 s told callers to retry
after a 301-digit number of seconds (a tool that should not be called for longer than a day is
taken out of the policy, not left behind an open breaker)."""


def _declared(classes: Iterable[str], where: str) -> frozenset[str]:
    """The names in ``classes`` that are not built in; ``InputError`` naming ``where`` unless it is
    a collection of non-empty strings (a subclass's ``classes = None`` included). A classifier's
    ``classes`` and ``SchedulerConfig.check_error_classes``'s ``declared`` are both checked so."""
    if isinstance(classes, str):
        raise InputError(f"{where}: give a tuple of error class names, got the string {quoted(classes)}")
    try:
        names = tuple(classes)
    except TypeError:
        raise InputError(f"{where}: give a tuple of error class names, got {quoted(classes)}") from None
    for name in names:
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: an error class is a non-empty string, got {quoted(name)}")
    return frozenset(names) - ERROR_CLASSES


_LISTED = 10
"""The most names a scheduler configuration's message lists (``_listed``)."""


def _listed(names: Iterable[object]) -> str:
    """``names`` as a message lists them: each quoted (40 characters at most), the first
    ``_LISTED`` of them, then how many more; a configuration of 100,000 names, or of one 5 MB
    name, makes a message of a line, not of megabytes."""
    listed = list(names)
    more = f", and {len(listed) - _LISTED} more" if len(listed) > _LISTED else ""
    return "[" + ", ".join(quoted(name, 40) for name in listed[:_LISTED]) + more + "]"


def _fail(what: str) -> NoReturn:
    raise InputError(f"scheduler configuration: {what}")


def _require(condition: bool, what: str) -> None:
    if not condition:
        _fail(what)


def _integer(
    value: object, where: str, minimum: int, *, optional: bool = False, maximum: int | None = None
) -> None:
    """``value`` is an int (not a bool) >= ``minimum`` and <= ``maximum`` when given, or None when
    ``optional``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"{where} must be an integer, got {quoted(value)}")
    if value < minimum:
        _fail(f"{where} must be >= {minimum}, got {quoted(value)}")
    if maximum is not None and value > maximum:
        _fail(f"{where} must be <= {maximum}, got {quoted(value)}")


def _number(
    value: object,
    where: str,
    minimum: float,
    *,
    above: bool = False,
    optional: bool = False,
    maximum: float | None = None,
) -> None:
    """``value`` is a finite int or float (not a bool) >= ``minimum`` (> when ``above``) and
    <= ``maximum`` when given, or None when ``optional``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(f"{where} must be a number, got {quoted(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer no float holds: it would overflow where the value is used
        finite = False
    _require(finite, f"{where} must be a finite number, got {quoted(value)}")
    if above:
        _require(value > minimum, f"{where} must be > {minimum}, got {value}")
    else:
        _require(value >= minimum, f"{where} must be >= {minimum}, got {value}")
    if maximum is not None:
        _require(value <= maximum, f"{where} must be <= {maximum:g}, got {value}")


def _instance(value: object, kind: type, where: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, kind):
        _fail(f"{where} must be a {kind.__name__}, got {quoted(value)}")


def _name(value: object, where: str) -> None:
    if not isinstance(value, str) or not value:
        _fail(f"{where} must be a non-empty string, got {quoted(value)}")


def _class_names(owner: object, attribute: str, where: str) -> None:
    """Check ``owner.attribute`` is a list or tuple of distinct non-empty strings; store it as a tuple."""
    value = getattr(owner, attribute)
    if isinstance(value, str) or not isinstance(value, tuple | list):
        _fail(f"{where} must be a tuple of error class names, got {quoted(value)}")
    for item in value:
        _name(item, f"{where} entry")
    _require(len(set(value)) == len(value), f"{where} repeats an error class: {quoted(list(value))}")
    object.__setattr__(owner, attribute, tuple(value))


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed attempt is retried.

    ``attempts`` counts every attempt, the first included (1 = never retry). Delays follow
    exponential backoff with full jitter: the n-th retry waits a uniform random time in
    ``[0, min(backoff_max_s, backoff_initial_s * multiplier ** (n - 1))]``, and never past the
    call's deadline. Each backoff field is at most ``MAX_BACKOFF_S`` (a day). Only failures whose error class is in ``retry_on`` are retried, and an
    ambiguous failure (``timeout``, ``connection``) only on a tool that is safe to repeat.
    """

    attempts: int = 1
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 10.0
    multiplier: float = 2.0
    retry_on: tuple[str, ...] = ("transient",)

    def __post_init__(self) -> None:
        _integer(self.attempts, "retry.attempts", 1)
        _number(self.backoff_initial_s, "retry.backoff_initial_s", 0, maximum=MAX_BACKOFF_S)
        _number(self.backoff_max_s, "retry.backoff_max_s", 0, maximum=MAX_BACKOFF_S)
        _require(
            self.backoff_max_s >= self.backoff_initial_s,
            f"retry.backoff_max_s ({self.backoff_max_s}) must be >= backoff_initial_s ({self.backoff_initial_s})",
        )
        _number(self.multiplier, "retry.multiplier", 1)
        _class_names(self, "retry_on", "retry.retry_on")


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``burst`` calls at once, refilled at ``per_second`` calls per second."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        _number(self.per_second, "rate.per_second", 0, above=True)
        _integer(self.burst, "rate.burst", 1)
        if self.burst > MAX_BURST:
            _fail(f"rate.burst must be <= {MAX_BURST}, got {quoted(self.burst)}")


@dataclass(frozen=True)
class ToolLimits:
    """What the scheduler enforces for one tool.

    ``concurrency``: most attempts of this tool running at once (None: no per-tool limit).
    ``rate``: token bucket every attempt takes a token from. ``timeout_s``: longest one attempt
    may run. ``idempotent``: running it twice has the effect of running it once.
    ``takes_idempotency_key``: the tool receives ``Attempt.idempotency_key`` and deduplicates on
    it, which makes it safe to repeat after an ambiguous failure.
    """

    concurrency: int | None = None
    rate: RateLimit | None = None
    timeout_s: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    idempotent: bool = False
    takes_idempotency_key: bool = False

    def __post_init__(self) -> None:
        # A store's lease limit (``LeaseManager.try_acquire``): until review R82 one above it
        # passed here, and every call of the tool then failed, recorded as a failed attempt.
        _integer(self.concurrency, "concurrency", 1, optional=True, maximum=MAX_STORED_INTEGER)
        _instance(self.rate, RateLimit, "rate", optional=True)
        _number(self.timeout_s, "timeout_s", 0, above=True, optional=True)
        _instance(self.retry, RetryPolicy, "retry")
        require_flag(self.idempotent, "scheduler configuration: idempotent")
        require_flag(self.takes_idempotency_key, "scheduler configuration: takes_idempotency_key")


@dataclass(frozen=True)
class PriorityClass:
    """A priority class. Lower ``rank`` (an integer from 0 to ``MAX_STORED_INTEGER``, 2**63 - 1)
    runs first (strictly); classes of equal rank share by ``weight`` (more than 0, at most
    ``MAX_WEIGHT``). Until review R88 a rank had no upper bound, and a call of a class ranked past
    4,300 digits that had to wait raised a bare ``ValueError`` from ``submit`` (the fair queue
    names its rank nodes by their number)."""

    name: str
    rank: int = 0
    weight: float = 1.0

    def __post_init__(self) -> None:
        _name(self.name, "priority class name")
        _integer(self.rank, f"priority class {quoted(self.name)}: rank", 0, maximum=MAX_STORED_INTEGER)
        _number(self.weight, f"priority class {quoted(self.name)}: weight", 0, above=True, maximum=MAX_WEIGHT)


@dataclass(frozen=True)
class TenantShare:
    """One tenant's share: fair-queueing ``weight`` (more than 0, at most ``MAX_WEIGHT``), and
    optional concurrency and queue bounds."""

    weight: float = 1.0
    concurrency: int | None = None
    max_queued: int | None = None

    def __post_init__(self) -> None:
        _number(self.weight, "tenant weight", 0, above=True, maximum=MAX_WEIGHT)
        _integer(self.concurrency, "tenant concurrency", 1, optional=True)
        _integer(self.max_queued, "tenant max_queued", 0, optional=True)


@dataclass(frozen=True)
class BreakerPolicy:
    """When a circuit breaker opens and how it probes.

    ``failure_threshold`` consecutive failures of a class in ``trip_on`` open the breaker; after
    ``reset_timeout_s`` (more than 0, at most ``MAX_RESET_TIMEOUT_S``, a day) it lets
    ``half_open_max_calls`` probe calls through; a probe success closes it, a probe failure opens
    it again.
    """

    failure_threshold: int = 5
    reset_timeout_s: float = 30.0
    half_open_max_calls: int = 1
    trip_on: tuple[str, ...] = ("transient", "timeout", "connection")

    def __post_init__(self) -> None:
        _integer(self.failure_threshold, "breaker.failure_threshold", 1)
        _number(self.reset_timeout_s, "breaker.reset_timeout_s", 0, above=True, maximum=MAX_RESET_TIMEOUT_S)
        # The probes' lease limit on a store, as a tool's ``concurrency`` (review R82).
        _integer(self.half_open_max_calls, "breaker.half_open_max_calls", 1, maximum=MAX_STORED_INTEGER)
        _class_names(self, "trip_on", "breaker.trip_on")


_DEFAULT_CLASSES = (PriorityClass("default", 0, 1.0),)
MAX_LEASE_TTL_S = 10 * 365 * 86_400
"""Longest lease lifetime: ten years (a longer one cannot be waited on by the heartbeat thread)."""
MIN_LEASE_TTL_S = 1.0
"""Shortest lease lifetime. A holder renews its leases every third of it, through the store: a
lease of a few milliseconds expired while its call still ran, and another process took the slot
(two calls of a tool limited to one at once)."""


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits that are not per tool, plus the per-tool table.

    ``max_concurrency``: attempts running at once in this scheduler (None: unbounded).
    ``tenant`` / ``tenants``: the default share and per-tenant overrides (weight, concurrency,
    queue bound). ``principal_concurrency``: most attempts one principal (agent) runs at once.
    ``max_queued``: calls waiting in this scheduler; beyond it ``submit`` raises ``Overloaded``.
    ``tools`` / ``default_tool``: per-tool limits and the limits of tools not listed.
    ``lease_ttl_s``: lifetime of a cross-process slot lease (1 s to ten years); a dead holder's
    slot returns after it.
    ``result_cache_size``: completed results kept in memory for reuse by idempotency key.
    """

    max_concurrency: int | None = None
    principal_concurrency: int | None = None
    max_queued: int = 100_000
    tenant: TenantShare = field(default_factory=TenantShare)
    tenants: Mapping[str, TenantShare] = field(default_factory=dict)
    priority_classes: tuple[PriorityClass, ...] = _DEFAULT_CLASSES
    default_priority: str = "default"
    tools: Mapping[str, ToolLimits] = field(default_factory=dict)
    default_tool: ToolLimits = field(default_factory=ToolLimits)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    lease_ttl_s: float = 10.0
    result_cache_size: int = 10_000

    def __post_init__(self) -> None:
        _integer(self.max_concurrency, "max_concurrency", 1, optional=True)
        _integer(self.principal_concurrency, "principal_concurrency", 1, optional=True)
        _integer(self.max_queued, "max_queued", 0)
        _instance(self.tenant, TenantShare, "tenant")
        _instance(self.tenants, Mapping, "tenants")
        for tenant, share in self.tenants.items():
            _name(tenant, "a tenant name in tenants")
            _instance(share, TenantShare, f"tenants[{quoted(tenant)}]")
        if isinstance(self.priority_classes, PriorityClass) or not isinstance(
            self.priority_classes, tuple | list
        ):
            _fail(f"priority_classes must be a tuple of PriorityClass, got {quoted(self.priority_classes)}")
        _require(bool(self.priority_classes), "at least one priority class is needed")
        for cls in self.priority_classes:
            _instance(cls, PriorityClass, "a priority_classes entry")
        names = [c.name for c in self.priority_classes]
        repeated = sorted(name for name, times in Counter(names).items() if times > 1)
        _require(not repeated, f"priority class names repeat: {_listed(repeated)}")
        if self.default_priority not in names:
            _fail(f"default_priority {quoted(self.default_priority)} is not one of {_listed(names)}")
        _instance(self.tools, Mapping, "tools")
        for tool, limits in self.tools.items():
            _name(tool, "a tool name in tools")
            _require(
                tool != OTHER,
                f"the tool name {OTHER} is reserved (metrics and breakers fold other tools into it)",
            )
            _instance(limits, ToolLimits, f"tools[{quoted(tool)}]")
        _instance(self.default_tool, ToolLimits, "default_tool")
        _instance(self.breaker, BreakerPolicy, "breaker")
        _number(self.lease_ttl_s, "lease_ttl_s", MIN_LEASE_TTL_S)
        _require(
            self.lease_ttl_s <= MAX_LEASE_TTL_S,
            f"lease_ttl_s must be <= {MAX_LEASE_TTL_S}, got {self.lease_ttl_s}",
        )
        _integer(self.result_cache_size, "result_cache_size", 0)
        # Freeze the values: a frozen dataclass holding a dict or a list could still be changed in place.
        object.__setattr__(self, "priority_classes", tuple(self.priority_classes))
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))

    def check_error_classes(self, declared: Iterable[str] = ()) -> None:
        """Raise ``InputError`` unless every ``retry_on`` and ``trip_on`` class is one a classifier
        can return: the built-in ``ERROR_CLASSES`` or one of ``declared`` (the classifier's
        ``classes``). A class no classifier returns would silently never be retried (or never trip
        the breaker). The error names the field (``tools['x'].retry.retry_on``) and the class, and
        lists the known classes (the first ten). ``InputError`` too unless ``declared`` is a
        collection of non-empty strings (one string would declare its letters); until review R86d
        ``[1]`` or a nested tuple raised a bare ``TypeError``, and a 5 MB name made a 5 MB message.
        """
        known = ERROR_CLASSES | _declared(declared, "scheduler configuration: declared error classes")
        fields: list[tuple[str, tuple[str, ...]]] = [
            (f"tools[{quoted(tool)}].retry.retry_on", limits.retry.retry_on)
            for tool, limits in self.tools.items()
        ]
        fields.append(("default_tool.retry.retry_on", self.default_tool.retry.retry_on))
        fields.append(("breaker.trip_on", self.breaker.trip_on))
        for where, classes in fields:
            for name in classes:
                if name not in known:
                    _fail(
                        f"{where}: {quoted(name)} is not an error class the classifier returns "
                        f"(known: {_listed(sorted(known))}; a custom classifier declares its own in Classifier.classes)"
                    )

    def tool_limits(self, tool: str) -> ToolLimits:
        """The limits of ``tool``: its own entry, else ``default_tool``."""
        return self.tools.get(tool, self.default_tool)

    def tenant_share(self, tenant: str) -> TenantShare:
        """The share of ``tenant``: its own entry, else ``tenant``."""
        return self.tenants.get(tenant, self.tenant)

    def priority_class(self, name: str | None) -> PriorityClass:
        """The class named ``name`` (None: the default class); raises ``InputError`` if unknown."""
        wanted = name or self.default_priority
        for cls in self.priority_classes:
            if cls.name == wanted:
                return cls
        raise InputError(
            f"unknown priority class {quoted(wanted)}; known: {_listed(c.name for c in self.priority_classes)}"
        )
