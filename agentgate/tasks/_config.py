"""Plain, frozen configuration values for the scheduler.

The policy's ``tools`` section maps onto these one to one (``RetryPolicy``, ``RateLimit``,
``ToolLimits``, ``PriorityClass``); ``SchedulerConfig`` adds the limits that are not per tool.
Every value is checked when it is built, so a scheduler never starts with a limit that cannot
hold (a zero concurrency, a negative rate): those raise ``InputError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from agentgate.errors import InputError

#: Error classes that leave it unknown whether the tool's effect happened (docs/tasks.md): every
#: class but ``transient`` (a failure known to come before any effect). ``error`` is among them:
#: a tool may raise after its effect (a payment service's 500 after the charge, a response that
#: does not parse), so listing it in ``retry_on`` repeats only tools that are safe to repeat.
AMBIGUOUS_CLASSES = frozenset({"timeout", "connection", "error"})


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise InputError(f"scheduler configuration: {what}")


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed attempt is retried.

    ``attempts`` counts every attempt, the first included (1 = never retry). Delays follow
    exponential backoff with full jitter: the n-th retry waits a uniform random time in
    ``[0, min(backoff_max_s, backoff_initial_s * multiplier ** (n - 1))]``, and never past the
    call's deadline. Only failures whose error class is in ``retry_on`` are retried, and an
    ambiguous failure (``timeout``, ``connection``) only on a tool that is safe to repeat.
    """

    attempts: int = 1
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 10.0
    multiplier: float = 2.0
    retry_on: tuple[str, ...] = ("transient",)

    def __post_init__(self) -> None:
        _require(self.attempts >= 1, f"retry.attempts must be >= 1, got {self.attempts}")
        _require(
            self.backoff_initial_s >= 0, f"retry.backoff_initial_s must be >= 0, got {self.backoff_initial_s}"
        )
        _require(
            self.backoff_max_s >= self.backoff_initial_s,
            f"retry.backoff_max_s ({self.backoff_max_s}) must be >= backoff_initial_s ({self.backoff_initial_s})",
        )
        _require(self.multiplier >= 1, f"retry.multiplier must be >= 1, got {self.multiplier}")


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``burst`` calls at once, refilled at ``per_second`` calls per second."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        _require(self.per_second > 0, f"rate.per_second must be > 0, got {self.per_second}")
        _require(self.burst >= 1, f"rate.burst must be >= 1, got {self.burst}")


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
        _require(
            self.concurrency is None or self.concurrency >= 1,
            f"concurrency must be >= 1, got {self.concurrency}",
        )
        _require(self.timeout_s is None or self.timeout_s > 0, f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True)
class PriorityClass:
    """A priority class. Lower ``rank`` runs first (strictly); classes of equal rank share by ``weight``."""

    name: str
    rank: int = 0
    weight: float = 1.0

    def __post_init__(self) -> None:
        _require(bool(self.name), "a priority class needs a name")
        _require(self.weight > 0, f"priority class {self.name!r}: weight must be > 0, got {self.weight}")


@dataclass(frozen=True)
class TenantShare:
    """One tenant's share: fair-queueing ``weight``, and optional concurrency and queue bounds."""

    weight: float = 1.0
    concurrency: int | None = None
    max_queued: int | None = None

    def __post_init__(self) -> None:
        _require(self.weight > 0, f"tenant weight must be > 0, got {self.weight}")
        _require(
            self.concurrency is None or self.concurrency >= 1,
            f"tenant concurrency must be >= 1, got {self.concurrency}",
        )
        _require(
            self.max_queued is None or self.max_queued >= 0,
            f"tenant max_queued must be >= 0, got {self.max_queued}",
        )


@dataclass(frozen=True)
class BreakerPolicy:
    """When a circuit breaker opens and how it probes.

    ``failure_threshold`` consecutive failures of a class in ``trip_on`` open the breaker; after
    ``reset_timeout_s`` it lets ``half_open_max_calls`` probe calls through; a probe success
    closes it, a probe failure opens it again.
    """

    failure_threshold: int = 5
    reset_timeout_s: float = 30.0
    half_open_max_calls: int = 1
    trip_on: tuple[str, ...] = ("transient", "timeout", "connection")

    def __post_init__(self) -> None:
        _require(
            self.failure_threshold >= 1,
            f"breaker.failure_threshold must be >= 1, got {self.failure_threshold}",
        )
        _require(self.reset_timeout_s > 0, f"breaker.reset_timeout_s must be > 0, got {self.reset_timeout_s}")
        _require(
            self.half_open_max_calls >= 1,
            f"breaker.half_open_max_calls must be >= 1, got {self.half_open_max_calls}",
        )


_DEFAULT_CLASSES = (PriorityClass("default", 0, 1.0),)


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits that are not per tool, plus the per-tool table.

    ``max_concurrency``: attempts running at once in this scheduler (None: unbounded).
    ``tenant`` / ``tenants``: the default share and per-tenant overrides (weight, concurrency,
    queue bound). ``principal_concurrency``: most attempts one principal (agent) runs at once.
    ``max_queued``: calls waiting in this scheduler; beyond it ``submit`` raises ``Overloaded``.
    ``tools`` / ``default_tool``: per-tool limits and the limits of tools not listed.
    ``lease_ttl_s``: lifetime of a cross-process slot lease; a dead holder's slot returns after it.
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
        _require(self.max_concurrency is None or self.max_concurrency >= 1, "max_concurrency must be >= 1")
        _require(
            self.principal_concurrency is None or self.principal_concurrency >= 1,
            "principal_concurrency must be >= 1",
        )
        _require(self.max_queued >= 0, f"max_queued must be >= 0, got {self.max_queued}")
        _require(bool(self.priority_classes), "at least one priority class is needed")
        names = [c.name for c in self.priority_classes]
        _require(len(set(names)) == len(names), f"priority class names repeat: {names}")
        _require(
            self.default_priority in names,
            f"default_priority {self.default_priority!r} is not one of {names}",
        )
        _require(self.lease_ttl_s > 0, f"lease_ttl_s must be > 0, got {self.lease_ttl_s}")
        _require(self.result_cache_size >= 0, f"result_cache_size must be >= 0, got {self.result_cache_size}")
        # Freeze the mappings: a frozen dataclass holding a dict could still be changed in place.
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))

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
            f"unknown priority class {wanted!r}; known: {[c.name for c in self.priority_classes]}"
        )
