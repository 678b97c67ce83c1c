"""The values that flow in and out of the broker: requests, quotas, leases and events.

All are frozen dataclasses: the broker replaces a lease when it renews or notifies it, and never
mutates one a caller holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from agentgate._names import first_non_ascii
from agentgate._numbers import finite, is_number
from agentgate._time import utc_text
from agentgate.dispatch.broker._quoting import quoted
from agentgate.dispatch.broker._topology import LEVELS, Level
from agentgate.errors import BrokerError

Bound = Literal["compute", "memory", "communication"]
"""What limits the workload: compute, device memory, or communication between its GPUs."""

Kind = Literal["training", "inference", "preprocessing"]
"""What the workload does; decides placement preferences together with ``Bound``."""

EndReason = Literal["released", "expired", "preempted"]
"""Why a lease ended: its holder released it, it was not renewed in time, or its grace ran out."""

PreemptReason = Literal["priority", "reclaim"]
"""Why a lease is preempted: a higher-priority gang of its tenant, or a lender reclaiming quota."""

MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
"""The priorities a request may have: a 32-bit integer, as a Kubernetes PriorityClass value and
the journal's ``priority`` column (PostgreSQL's ``INTEGER``) hold. One outside it could be granted
and then never journaled: every later write of the broker failed on it, for every tenant."""

MIN_TTL_S = 0.001
"""The shortest time-to-live a lease may have (a millisecond), a request's ``ttl_s`` and the
broker's default alike: a lease must outlive the call that grants it. Until review R82 any
``ttl_s`` above 0 was taken, and one below the clock's resolution (``1e-7`` at a Unix time of
``1.8e9``, where a double's step is ``2.4e-7``) added nothing to it: the lease expired in the call
that granted it, as one of ``ttl_s`` 0 did until review R52. A millisecond moves any clock that
reads a date (up to the year 9999, where the step is ``3e-5``)."""


MAX_REQUEST_ID = 256
"""The most characters a request id may have (a UUID has 36). The broker writes every live id
into its journal at each change, and quotes ids in its errors: a 1 MB id, which a grant
bounding only ``count`` allowed, made each call of every tenant rewrite it (8 of them: 0.5 s a
call, the broker locked meanwhile, against 3 ms)."""


_NUL_HELD = "a NUL character (U+0000), which a store cannot hold (PostgreSQL text holds none)"
"""Why a request's or a quota's text may hold no NUL: the journal writes it (the id and the tenant
in their own columns), and until review R68 a request with one was granted, and the journal's
write failed on it and on every later call of every tenant while it lived."""


def _storable(value: str) -> bool:
    """Whether ``value`` is text a store can hold (UTF-8 encodable: no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_number(value: object) -> str:
    """``value`` as a message quotes it: no integer of more than 18 digits, which could run to
    thousands of digits (or more than Python will write), and anything else as ``quoted`` bounds
    it. Until a regression review of R85 anything else was its plain ``repr``: a time or a
    ``ttl_s`` that was a list holding an integer of 5,000 digits made the refusal itself a bare
    ``ValueError`` (``Broker.restore``, ``GangRequest``, ``Broker``'s defaults)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return "an integer of more than 18 digits"
    return quoted(value)


def short_ttl(ttl_s: float) -> str:
    """Why ``ttl_s``, below ``MIN_TTL_S``, is refused (a request's or the broker's default)."""
    return f"ttl_s must be more than 0: at least {MIN_TTL_S} s (a millisecond), got {shown_number(ttl_s)}"


def finite_non_negative(value: object) -> bool:
    """Whether ``value`` is a number (no bool), finite (``finite``: an integer too large for a float
    is not) and >= 0."""
    return finite(value) and value >= 0


LEASE_TIMES = ("granted_at", "expires_at", "notice_deadline")
"""A lease's times (``time_refused`` checks each)."""

_MAY_BE_NONE = ("notice_deadline", "deadline")


def taken_at_refused(taken_at: object) -> str | None:
    """Why ``taken_at`` is no time of a snapshot, or ``None`` when it is one: Unix seconds of a date
    from year 1 to 9999 (what ``utc_text`` shows). An infinity or ``1e300`` moved a restored
    broker's clock there, where a ``ttl_s`` added to it moves it no more: every lease ended in the
    call that granted it. The one check of the journal's ``load`` (since review R82) and of
    ``Broker.restore`` (since review R85)."""
    if is_number(taken_at) and utc_text(taken_at) is not None:
        return None
    return f"its taken_at is {shown_number(taken_at):.60}, not a time in Unix seconds (of a date from year 1 to 9999)"


def time_refused(name: str, value: object) -> str | None:
    """Why ``value`` is no time for the field ``name`` of a snapshot's lease (``LEASE_TIMES``) or
    waiting request (``submitted_at``, ``deadline``), or ``None`` when it is one: a finite number
    (``finite``), or ``None`` for a lease not notified (``notice_deadline``) and a request that
    never times out (``deadline``). A lease whose ``expires_at`` was NaN never expired, and no
    journal could write it. The one check of the journal's ``load`` (since review R68) and of
    ``Broker.restore`` (since review R85), which checks a waiting request's ``deadline`` by
    ``queued_deadline_refused`` (a snapshot's "never" is ``inf``, not a stored row's ``None``)."""
    if (value is None and name in _MAY_BE_NONE) or finite(value):
        return None
    none = " or none" if name in _MAY_BE_NONE else ""
    return f"{name} must be a finite number{none}, got {shown_number(value):.80}"


def queued_deadline_refused(deadline: object) -> str | None:
    """Why ``deadline`` is no ``QueuedRequest.deadline`` of a snapshot that ``Broker.restore``
    takes, or ``None`` when it is one: a finite number, or infinity for a request that never times
    out (as ``QueuedRequest`` holds it, and the journal's ``load`` reads its stored NULL). ``None``
    is none here: until a regression review of R85 restore let it through (``time_refused``'s
    "none" is the stored row's), and then failed comparing it, a ``TypeError`` after the leases
    were taken over, and the broker refused a second restore as "not empty"."""
    if finite(deadline) or (is_number(deadline) and deadline == math.inf):
        return None
    return f"deadline must be a finite number or inf (it never times out), got {shown_number(deadline):.80}"


@dataclass(frozen=True, slots=True)
class WorkloadHint:
    """How the gang behaves; changes where it is placed (docs/broker.md, "Topology")."""

    bound: Bound = "compute"
    """``communication``: packed inside one NVLink domain; ``memory``: largest-memory GPUs first."""
    kind: Kind = "training"
    """``inference`` prefers one node; ``preprocessing`` takes the smallest-memory GPUs first."""

    def __post_init__(self) -> None:
        """Raises ``BrokerError`` for a bound or kind that is none of the ones listed."""
        if self.bound not in get_args(Bound):
            raise BrokerError(
                f"workload bound must be one of {', '.join(get_args(Bound))}, got {quoted(self.bound)}"
            )
        if self.kind not in get_args(Kind):
            raise BrokerError(
                f"workload kind must be one of {', '.join(get_args(Kind))}, got {quoted(self.kind)}"
            )


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """All GPUs of the gang in one group at ``level``; ``required`` or only preferred."""

    level: Level
    """``nvlink_domain``, ``node`` or ``rack``."""
    required: bool = True
    """Required: the gang waits (or times out) rather than spread. Preferred: it spreads only
    after the broker's locality wait."""

    def __post_init__(self) -> None:
        """Raises ``BrokerError`` for a level that is none of the three, or a ``required`` that is
        not ``True`` or ``False``."""
        if self.level not in LEVELS:
            raise BrokerError(f"topology level must be one of {', '.join(LEVELS)}, got {quoted(self.level)}")
        if not isinstance(self.required, bool):
            raise BrokerError(f"topology required must be true or false, got {quoted(self.required)}")


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A request for ``gpus`` GPUs, all granted together or none.

    Raises ``BrokerError`` on construction for an empty id or tenant, an id longer than
    ``MAX_REQUEST_ID`` characters, fewer than one GPU, a
    priority outside ``MIN_PRIORITY..MAX_PRIORITY``, a negative or non-finite time, a ``ttl_s``
    under ``MIN_TTL_S``, text that is
    not valid Unicode (a lone surrogate) or holds a NUL, or a field of the wrong kind (a ``hint`` that is no
    ``WorkloadHint``, a ``topology`` that is no ``TopologyConstraint``, an empty, non-text or
    non-ASCII ``gpu_type``, a ``holder`` that is not text): a request the broker queues must be one
    it can place and journal, or every later call would fail on it.
    """

    id: str
    """Unique request id; the lease, once granted, has the same id."""
    tenant: str
    """The tenant whose quota pays for the GPUs."""
    gpus: int
    """How many GPUs, all or nothing."""
    priority: int = 0
    """Higher preempts lower within a tenant (never across tenants, except reclaim)."""
    hint: WorkloadHint = field(default_factory=WorkloadHint)
    """Workload characterization that changes placement."""
    topology: TopologyConstraint | None = None
    """Explicit topology constraint; ``None``: the hint decides."""
    gpu_type: str | None = None
    """Only GPUs of this type, in any case (``h100`` is ``H100``: a lease of it is decided as
    ``gpu:h100``); ASCII."""
    min_memory_gb: float = 0.0
    """Only GPUs with at least this much memory."""
    timeout_s: float = 3600.0
    """How long the request may wait in the queue before it times out with nothing."""
    ttl_s: float | None = None
    """Lease time-to-live between renewals, at least ``MIN_TTL_S``; ``None``: the broker's default."""
    grace_s: float | None = None
    """Checkpoint grace after a preemption notice; ``None``: the broker's default."""
    holder: str = ""
    """Who holds the lease (a process, an agent); informative."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not isinstance(self.tenant, str) or not self.id or not self.tenant:
            raise BrokerError("a gang request needs a non-empty id and tenant")
        if len(self.id) > MAX_REQUEST_ID:
            raise BrokerError(
                f"request {self.id[:40]!r}... ({len(self.id)} characters): an id is at most "
                f"{MAX_REQUEST_ID} characters (a UUID has 36)"
            )
        for name in ("gpus", "priority"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise BrokerError(
                    f"request {quoted(self.id)}: {name} must be an integer, got {quoted(value)}"
                )
        if self.gpus < 1:
            raise BrokerError(
                f"request {quoted(self.id)}: gpus must be at least 1, got {shown_number(self.gpus)}"
            )
        if not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise BrokerError(
                f"request {quoted(self.id)}: priority must be between {MIN_PRIORITY} and {MAX_PRIORITY} "
                f"(a 32-bit integer), got {shown_number(self.priority)}"
            )
        if not isinstance(self.hint, WorkloadHint):
            raise BrokerError(
                f"request {quoted(self.id)}: hint must be a WorkloadHint, got {quoted(self.hint)}"
            )
        if self.topology is not None and not isinstance(self.topology, TopologyConstraint):
            raise BrokerError(
                f"request {quoted(self.id)}: topology must be a TopologyConstraint, got {quoted(self.topology)}"
            )
        if self.gpu_type is not None and (not isinstance(self.gpu_type, str) or not self.gpu_type):
            raise BrokerError(
                f"request {quoted(self.id)}: gpu_type must be a GPU type's name, got {quoted(self.gpu_type)}"
            )
        if not isinstance(self.holder, str):
            raise BrokerError(f"request {quoted(self.id)}: holder must be text, got {quoted(self.holder)}")
        for name in ("id", "tenant", "gpu_type", "holder"):
            value = getattr(self, name)
            if value is not None and not _storable(value):
                raise BrokerError(
                    f"request {quoted(self.id)}: {name} is not valid Unicode text (a lone surrogate)"
                )
            if value is not None and "\x00" in value:
                raise BrokerError(f"request {quoted(self.id)}: {name} holds {_NUL_HELD}")
        where = None if self.gpu_type is None else first_non_ascii(self.gpu_type)
        if where is not None:
            # ``GatedBroker`` decides a lease as ``gpu:<type in lower case>``: until review R68
            # ``\u212a80`` (KELVIN SIGN) was decided as ``gpu:k80``. Topologies hold ASCII types.
            raise BrokerError(
                f"request {quoted(self.id)}: gpu_type {quoted(self.gpu_type)} holds {where}: "
                "a GPU type is ASCII (a lease is decided as gpu:TYPE, the type in lower case)"
            )
        for name in ("timeout_s", "ttl_s", "grace_s", "min_memory_gb"):
            value = getattr(self, name)
            if value is None and name in ("ttl_s", "grace_s"):
                continue
            if not finite_non_negative(value):
                raise BrokerError(
                    f"request {quoted(self.id)}: {name} must be finite and >= 0, got {shown_number(value)}"
                )
        if self.ttl_s is not None and self.ttl_s < MIN_TTL_S:
            # A lease that ends as it is granted could not be used or renewed, and in the call
            # that granted it could be notified of a preemption and end in one breath.
            raise BrokerError(f"request {quoted(self.id)}: {short_ttl(self.ttl_s)}")


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's GPU quota, as a Kueue ClusterQueue with one resource.

    Raises ``BrokerError`` on construction for a negative quota or limit, a tenant or cohort that
    is not non-empty valid Unicode text without a NUL (a cohort may be ``None``), or a ``borrowing_limit``
    without a cohort (Kueue refuses it too: "borrowingLimit must be nil when cohort is empty").
    """

    tenant: str
    """The tenant."""
    nominal: int
    """GPUs the tenant is guaranteed; what it lends to its cohort while it does not use them."""
    borrowing_limit: int | None = None
    """Most GPUs above ``nominal`` it may borrow from its cohort; ``None``: no limit but the
    cohort's unused quota."""
    cohort: str | None = None
    """Tenants in one cohort lend each other unused nominal quota; ``None``: no borrowing."""

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not self.tenant:
            raise BrokerError("a quota needs a tenant")
        for value in (self.nominal, 0 if self.borrowing_limit is None else self.borrowing_limit):
            if not isinstance(value, int) or isinstance(value, bool):
                raise BrokerError(
                    f"quota of {quoted(self.tenant)}: nominal and borrowing_limit must be integers"
                )
        if self.nominal < 0 or (self.borrowing_limit is not None and self.borrowing_limit < 0):
            raise BrokerError(f"quota of {quoted(self.tenant)}: nominal and borrowing_limit must be >= 0")
        if not _storable(self.tenant):
            # No request could name it (``GangRequest`` refuses such text): a quota nobody can use.
            raise BrokerError(
                f"quota of {quoted(self.tenant)}: the tenant is not valid Unicode text (a lone surrogate)"
            )
        if self.cohort is not None and (not isinstance(self.cohort, str) or not self.cohort):
            # A list here was a TypeError out of ``Broker(...)`` (a cohort is a dict key there).
            raise BrokerError(
                f"quota of {quoted(self.tenant)}: cohort must be a cohort's name or None, got {quoted(self.cohort)}"
            )
        if self.cohort is not None and not _storable(self.cohort):
            raise BrokerError(
                f"quota of {quoted(self.tenant)}: the cohort is not valid Unicode text (a lone surrogate)"
            )
        for name in ("tenant", "cohort"):
            if "\x00" in (getattr(self, name) or ""):
                raise BrokerError(f"quota of {quoted(self.tenant)}: the {name} holds {_NUL_HELD}")
        if self.borrowing_limit is not None and self.cohort is None:
            # Without a cohort there is nobody to borrow from: the limit would be ignored, and a
            # tenant its operator meant to let borrow would be held to its nominal quota unawares.
            raise BrokerError(
                f"quota of {quoted(self.tenant)}: borrowing_limit needs a cohort to borrow from "
                "(a tenant without one holds at most its nominal quota)"
            )


@dataclass(frozen=True, slots=True)
class Lease:
    """GPUs held by one gang until ``expires_at`` unless renewed."""

    id: str
    """Same as the request's id."""
    request: GangRequest
    """The request it grants."""
    gpus: tuple[str, ...]
    """GPU ids, all held together."""
    granted_at: float
    """Clock time of the grant."""
    expires_at: float
    """Clock time at which the GPUs return unless renewed; a notified lease ends at the earlier of
    this and ``notice_deadline`` (a renewal moves this, never the notice deadline)."""
    notice_deadline: float | None = None
    """Set once preempted: the end of the checkpoint grace; the lease ends then at the latest."""
    preempted_by: str | None = None
    """The request that preempts it."""
    preempt_reason: PreemptReason | None = None
    """Why it is preempted."""
    level: Level | None = None
    """The innermost level whose one group holds all its GPUs (``None``: spread over racks)."""

    @property
    def tenant(self) -> str:
        """The tenant paying for it."""
        return self.request.tenant

    @property
    def priority(self) -> int:
        """The request's priority."""
        return self.request.priority

    @property
    def state(self) -> Literal["active", "notified"]:
        """``notified`` once a preemption notice was sent, else ``active``."""
        return "active" if self.notice_deadline is None else "notified"


@dataclass(frozen=True, slots=True)
class Granted:
    """The gang got all its GPUs."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class CheckpointNotice:
    """The holder must checkpoint and release before ``deadline``; the lease ends then anyway."""

    lease: Lease
    deadline: float
    preemptor: str
    reason: PreemptReason


@dataclass(frozen=True, slots=True)
class LeaseEnded:
    """The lease's GPUs are back (free, or handed to a waiting preemptor)."""

    lease: Lease
    reason: EndReason
    at: float | None = None
    """Clock time at which the broker ended it (``None``: not known); an expiry or a grace end
    the broker applies late is at the time it applied it, while the lease ended at its
    ``expires_at`` or ``notice_deadline``."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The request waited ``waited_s`` without being placed whole; it holds nothing."""

    request: GangRequest
    waited_s: float
    """How long it waited: its ``timeout_s``, or the shorter wait its caller bound it to
    (``Broker.submit``'s ``wait_s``: ``GatedBroker`` keeps a lease within its grant that way)."""


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """The holder released the request while it waited, or (``reason``) the broker withdrew it as
    it was about to take GPUs; it holds nothing."""

    request: GangRequest
    reason: str | None = None
    """Why the broker withdrew it (``Broker.grant_check``'s answer: through ``GatedBroker``, a
    grant of the chain that decided it was revoked); ``None``: its holder released it."""


BrokerEvent = Granted | CheckpointNotice | LeaseEnded | TimedOut | Withdrawn
"""Everything the broker tells its callers, returned by each call that changes state."""


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    """A waiting request as ``Broker.queue()`` shows it."""

    request: GangRequest
    submitted_at: float
    deadline: float
    """When it times out, nominated or not: a nominated request whose victims have not all ended
    by then times out, and its reservation goes back (until review R36 a nominated request never
    timed out)."""
    nominated: tuple[str, ...] = ()
    """GPUs reserved for it while its victims checkpoint; empty when not nominated."""
    victims: tuple[str, ...] = ()
    """Leases it waits on."""
    draining: bool = False
    """Whether ``nominated`` is a draining reservation (module docstring of the broker): some of
    those GPUs may still be held by leases that were not preempted."""


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """The broker's whole state at one moment: what the CLI shows and the store keeps."""

    taken_at: float
    """Clock time of the snapshot."""
    leases: tuple[Lease, ...]
    """Live leases, oldest grant first."""
    queue: tuple[QueuedRequest, ...]
    """Waiting requests in scheduling order."""
