"""The policy schema, version 1: frozen pydantic models, unknown fields refused.

Every field has a docstring; the JSON Schema export (``agentgate policy schema``) carries them
to editors. Durations are whole seconds (``*_s``) and money is integer micro-dollars
(``usd_micros``): a policy never holds a float amount of money.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from agentgate._durations import MAX_TTL_S as MAX_TTL_S
from agentgate._names import BudgetUnit
from agentgate._weights import MAX_WEIGHT

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
Scalar = str | int | float | bool
MAX_AMOUNT = 2**63 - 1
"""Largest budget or quota: what a grant can carry and a 64-bit store column can hold."""
PrincipalKind = Literal["human", "service", "agent"]
RetryClass = Literal["transient", "timeout", "connection", "error"]
"""The scheduler's error classes (agentgate.tasks): ``transient`` failed before any effect;
``timeout`` and ``connection`` are ambiguous (the effect may have happened); ``error`` is anything else."""
_RETRY_ON_DEFAULT: tuple[RetryClass, ...] = ("transient",)
SCHEMA_VERSION = 1


class _Model(BaseModel):
    # No infinity or NaN in any number a policy holds (a timeout of .inf never fires). The field
    # docstrings below are the JSON Schema's descriptions, read only when a schema is asked for
    # (``agentgate.policy.json_schema``), not with ``use_attribute_docstrings``: that reads each
    # model's source as it is defined, about half of this module's import (45 ms of every process
    # that loads a policy, until review R79).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def _written_out(value: Any) -> Any:
    """A ``before`` validator for a limit whose absence means none (unlimited, or the parent's
    whole): written as null (``budget:`` with nothing after it, a template variable never set) it
    would lift the limit its key announces. Refused at its line; leave the key out for no limit."""
    if value is None:
        raise ValueError("null (or nothing after ':') is no value: give one, or leave the key out for none")
    return value


class Settings(_Model):
    """Policy-wide limits."""

    max_ttl_s: int = Field(default=86_400, gt=0, le=MAX_TTL_S)
    """No grant issued under this policy may live longer than this many seconds."""
    revocation: bool = True
    """Whether revocation is checked for grants under this policy. Switching it off is a lint error."""


class TrustAnchor(_Model):
    """A key that may issue root grants. Give exactly one of ``did`` and ``key``."""

    did: str | None = None
    """The anchor's ``did:key``."""
    key: str | None = None
    """A public key file (did:key text or PEM), relative to the policy file."""
    description: str = ""


class Tenant(_Model):
    """A group of principals that quotas and fairness apply to."""

    description: str = ""


class Principal(_Model):
    """A human, service or agent, with its own key, its tenant and its roles."""

    kind: PrincipalKind
    """``human``, ``service`` or ``agent``."""
    did: str | None = None
    """The principal's ``did:key``."""
    key: str | None = None
    """A public key file (did:key text or PEM), relative to the policy file."""
    tenant: Name | None = None
    """The tenant it belongs to (a key of ``tenants``)."""
    roles: list[Name] = Field(default_factory=list)
    """Roles it holds (keys of ``roles``)."""
    description: str = ""


class Argument(_Model):
    """A declared tool argument."""

    type: Literal["string", "integer", "number", "boolean"]
    """The JSON type of the value."""
    required: bool = False
    """A call without it is denied."""
    description: str = ""


MIN_PER_SECOND = 1 / MAX_TTL_S
"""Slowest rate a tool's ``rate.per_second`` may be: a token every ten years, a grant's longest
lifetime. The scheduler waits ``1 / per_second`` for a token; until review R89 ``5e-324`` loaded,
a wait of infinity (a call kept waiting was said to get "a token in infs"), and ``1e-300`` one
that a message wrote as a 301-digit number of seconds."""


class RateLimit(_Model):
    """A token bucket: ``per_second`` refill, ``burst`` capacity."""

    per_second: float = Field(gt=0)
    """Sustained calls per second, at least 1/315360000 (a token every ten years)."""
    burst: int = Field(default=1, ge=1)
    """Calls allowed at once after an idle period."""

    @field_validator("per_second")
    @classmethod
    def _token_within_ten_years(cls, value: float) -> float:
        if 0 < value < MIN_PER_SECOND:
            raise ValueError(
                f"per_second must be at least 1/{MAX_TTL_S} (a token every ten years, the longest a "
                f"grant lives), got {value!r}"
            )
        return value

    @field_validator("burst")
    @classmethod
    def _countable_burst(cls, value: int) -> int:
        # The scheduler's buckets count in floats: refuse here, with the line, what it refuses.
        if value > 2**53:
            raise ValueError("burst must be <= 2**53")
        return value


_MAX_BACKOFF_S = 86_400.0
"""``agentgate.tasks._config.MAX_BACKOFF_S``, written out so that loading a policy imports no
scheduler (tests/test_policy_load.py checks that the two agree)."""


class RetryPolicy(_Model):
    """How the scheduler retries a failed call (never after an ambiguous failure of a non-idempotent tool)."""

    attempts: int = Field(default=1, ge=1, le=20)
    """Total attempts, including the first; 1 means no retry."""
    backoff_initial_s: float = Field(default=0.1, ge=0, le=_MAX_BACKOFF_S)
    """Wait before the second attempt."""
    backoff_max_s: float = Field(default=10.0, ge=0, le=_MAX_BACKOFF_S)
    """Longest wait between attempts (at most a day: ``agentgate.tasks._config.MAX_BACKOFF_S``,
    refused here at its line rather than when a Gate is made)."""
    multiplier: float = Field(default=2.0, ge=1)
    """Each wait is the previous one times this (capped by ``backoff_max_s``)."""
    retry_on: list[RetryClass] = Field(default_factory=lambda: list(_RETRY_ON_DEFAULT))
    """Failure classes that may be retried: ``transient``, ``timeout``, ``connection``, ``error``.
    The scheduler retries an ambiguous one (``timeout``, ``connection``) only on a tool that is
    idempotent or takes an idempotency key."""

    @model_validator(mode="after")
    def _backoff_order(self) -> RetryPolicy:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        return self

    @field_validator("retry_on")
    @classmethod
    def _distinct_classes(cls, value: list[RetryClass]) -> list[RetryClass]:
        # The scheduler's RetryPolicy refuses a repeated class: say so here, where the line is known.
        if len(set(value)) != len(value):
            raise ValueError(f"retry_on repeats an error class: {value}")
        return value


class Tool(_Model):
    """A tool agents may call, its arguments and how the scheduler runs it."""

    description: str = ""
    args: dict[str, Argument] = Field(default_factory=dict)
    """Declared arguments; a call with an undeclared argument is denied."""
    idempotent: bool = False
    """Whether running it twice has the effect of running it once."""
    takes_idempotency_key: bool = False
    """Whether the tool accepts an idempotency key, which makes retries safe."""
    timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for one attempt."""
    # At most a store's lease limit (review R82: a larger one was taken, and with a store every
    # call of the tool failed at run time).
    concurrency: int | None = Field(default=None, ge=1, le=MAX_AMOUNT)
    """Most calls running at once (at most 2**63 - 1); unlimited when absent."""
    rate: RateLimit | None = None
    """Rate limit; unlimited when absent."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retry policy; no retry by default."""
    loggable: list[str] = Field(default_factory=list)
    """Argument names that may be written to the audit log in clear (others are digested)."""

    _limits_written_out = field_validator("concurrency", "rate", mode="before")(_written_out)
    audit: bool = True
    """Whether calls are recorded in the audit log. Switching it off is a lint error."""


class ModelCost(_Model):
    """Price in micro-dollars per million tokens."""

    # At most MAX_AMOUNT, a budget's largest amount (review R63: 10**4299 was taken).
    input: int = Field(ge=0, le=MAX_AMOUNT)
    """Micro-dollars per million input (prompt) tokens."""
    output: int = Field(ge=0, le=MAX_AMOUNT)
    """Micro-dollars per million output (generated) tokens."""


class SloTargets(_Model):
    """Latency targets the router aims for."""

    # ttft_ms is the TTFT budget the dispatcher's router routes the model's calls under (the
    # gateway reads it; a Dispatcher given ``dispatch.model_slos(policy)`` too), unless a caller
    # names its own. tpot_ms is informational, not used for routing (the router predicts time to
    # first token only). See docs/policy-reference.md. (Comments, not docstrings: the docstrings
    # are the published policies/policy.schema.json.)
    ttft_ms: int | None = Field(default=None, gt=0)
    """Time to first token, milliseconds."""
    tpot_ms: int | None = Field(default=None, gt=0)
    """Time per output token, milliseconds."""


class ModelSpec(_Model):
    """A model agents may call."""

    description: str = ""
    cost_per_mtok: ModelCost
    """Price per million tokens, micro-dollars."""
    priority_classes: list[Name] = Field(default_factory=list)
    """Priority classes requests for this model may use (keys of ``priority_classes``)."""
    slo: SloTargets | None = None
    """Latency targets."""


def lease_cost(gpus: int, seconds: int | float, cost_per_gpu_hour: int) -> int:
    """Micro-dollars for ``gpus`` GPUs held ``seconds`` at ``cost_per_gpu_hour``: the time rounded up
    to whole seconds, the amount up to a whole micro-dollar, in exact integer arithmetic.

    Raises ``ValueError`` for a count or a price that is not a non-negative integer, or a time
    that is not a finite number >= 0.
    """
    for name, value in (("gpus", gpus), ("cost_per_gpu_hour", cost_per_gpu_hour)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < math.inf:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    return -(-gpus * math.ceil(seconds) * cost_per_gpu_hour // 3600)


class GpuType(_Model):
    """A GPU type agents lease through the broker (``gpu:NAME``), and its price."""

    description: str = ""
    cost_per_gpu_hour: int = Field(ge=0)
    """Micro-dollars per GPU-hour of lease time. A lease decision reserves ``count`` GPUs times
    the seconds it grants (rounded up) at this price from the chain's ``usd_micros`` budgets; the
    lease's end settles the time actually held. A type not declared here is leased free of charge."""

    @field_validator("cost_per_gpu_hour")
    @classmethod
    def _storable_price(cls, value: int) -> int:
        # A lease decision records its price in a 64-bit column: refuse here, with the line, a
        # price the store cannot hold (a validator, like ``burst``'s, keeps the JSON Schema as is).
        if value > MAX_AMOUNT:
            raise ValueError("cost_per_gpu_hour must be <= 2**63 - 1")
        return value

    def lease_cost(self, gpus: int, seconds: int | float) -> int:
        """``lease_cost(gpus, seconds, self.cost_per_gpu_hour)``."""
        return lease_cost(gpus, seconds, self.cost_per_gpu_hour)


class PriorityClass(_Model):
    """Who waits and who is shed when capacity is short (the scheduler's ``PriorityClass``)."""

    rank: int = Field(default=0, ge=0, le=1000)
    """Lower runs first, strictly."""
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT)
    """Share among classes of equal rank: more than 0, at most 1,000,000."""
    preemptible: bool = False
    """Whether work in this class may be preempted (with a checkpoint notice)."""
    description: str = ""


class ConstraintSpec(_Model):
    """Operators on one argument, all of which must hold (see agentgate.capabilities)."""

    model_config = ConfigDict(populate_by_name=False)

    eq: Scalar | None = None
    """Equal to this value."""
    in_: list[Scalar] | None = Field(default=None, alias="in")
    """One of these values."""
    lt: int | float | None = None
    """Less than."""
    le: int | float | None = None
    """Less than or equal."""
    gt: int | float | None = None
    """Greater than."""
    ge: int | float | None = None
    """Greater than or equal."""
    prefix: str | None = None
    """A string starting with this."""

    @field_validator("eq", "in_", "lt", "le", "gt", "ge", "prefix", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # Operators are a conjunction: one written as null (``ge:`` with its value left out, a
        # template variable that was never set) would be dropped, and the rule would allow more
        # than its text says (``{ge: , le: 500}`` read as ``le: 500``). Refuse it, with its line.
        if value is None:
            raise ValueError("an operator needs a value; null (or nothing after ':') is none")
        return value

    def as_mapping(self) -> dict[str, Any]:
        """The mapping form ``Constraint.of`` takes."""
        return {k: v for k, v in self.model_dump(by_alias=True, exclude_none=True).items()}


class CapabilityRule(_Model):
    """A capability: resource pattern, action, and constraints on the call's arguments."""

    resource: str
    """``tool:NAME``, ``model:NAME``, ``gpu:NAME``, or a pattern ``tool:prefix.*`` / ``tool:*``."""
    action: str | None = None
    """Defaults to the resource kind's action (``invoke``, ``generate``, ``lease``)."""
    constraints: dict[str, ConstraintSpec] = Field(default_factory=dict)
    """Argument name -> operators, e.g. ``{amount: {le: 500}}``."""


class Budget(_Model):
    """A spending limit in integer minor units."""

    limit: int = Field(ge=0, le=MAX_AMOUNT)
    """Most that may be spent."""
    unit: BudgetUnit = "usd_micros"
    """``usd_micros``, ``tokens`` or ``calls``."""


class Delegation(_Model):
    """What a holder of the role may hand on to sub-agents."""

    max_depth: int = Field(default=1, ge=0, le=15)
    """How many further delegation steps the role's grant allows."""
    max_ttl_s: int | None = Field(default=None, gt=0, le=MAX_TTL_S)
    """Longest life of a delegated grant; must not exceed the role's ``ttl_s``."""
    capabilities: list[CapabilityRule] = Field(default_factory=list)
    """Capabilities that may be handed on, each within one the role holds."""
    budget: Budget | None = None
    """Most budget a delegated grant may carry."""
    share_grant: bool = False
    """Let sub-agents run on the delegator's own grant. A lint error: give each sub-agent its own."""

    _limits_written_out = field_validator("max_ttl_s", "budget", mode="before")(_written_out)


class Role(_Model):
    """A set of capabilities with a budget, a lifetime and delegation rules."""

    description: str = ""
    kind: PrincipalKind | None = None
    """Which kind of principal the role is for; a role held by any agent is an agent role."""
    inherits: list[Name] = Field(default_factory=list)
    """Roles whose capabilities this role also holds, whole."""
    capabilities: list[CapabilityRule] = Field(default_factory=list)
    """What holders may do; anything else is denied."""
    budget: Budget | None = None
    """Spending limit of a grant for this role."""
    ttl_s: int | None = Field(default=None, gt=0, le=MAX_TTL_S)
    """Lifetime of a grant for this role, seconds."""
    delegation: Delegation | None = None
    """What may be handed on; absent means nothing (``max_depth`` 0)."""
    revocable: bool = True
    """Whether grants for this role can be revoked. Switching it off is a lint error."""

    _limits_written_out = field_validator("budget", "ttl_s", "delegation", mode="before")(_written_out)


class Quota(_Model):
    """A limit per time window on one tenant, principal or role (exactly one of the three)."""

    tenant: Name | None = None
    principal: Name | None = None
    role: Name | None = None
    window_s: int = Field(gt=0, le=MAX_TTL_S)
    """Length of the window, seconds."""
    limit: int = Field(ge=0, le=MAX_AMOUNT)
    """Most usage in one window."""
    unit: BudgetUnit = "calls"
    """``calls``, ``tokens`` or ``usd_micros``."""
    resources: list[str] = ["tool:*", "model:*"]
    """Resource patterns the quota counts."""

    @model_validator(mode="after")
    def _one_subject(self) -> Quota:
        if sum(x is not None for x in (self.tenant, self.principal, self.role)) != 1:
            raise ValueError("give exactly one of tenant, principal, role")
        return self


class ApprovalGate(_Model):
    """Calls that need a human sign-off before they run."""

    resource: str
    """The tool (or tool pattern) the gate guards."""
    when: dict[str, ConstraintSpec] = Field(default_factory=dict)
    """The gate applies when every one of these holds (always when empty). A call missing a named argument needs approval."""
    approvers: list[Name] = Field(min_length=1)
    """Principals who may approve (keys of ``principals``); never the requester."""
    quorum: int = Field(default=1, ge=1, le=1000)
    """How many distinct approvers must sign."""
    expiry_s: int = Field(default=3600, gt=0, le=MAX_TTL_S)
    """How long an approval stays valid, seconds."""


class PolicyDocument(_Model):
    """An agentgate policy file."""

    version: Literal[1]
    """Schema version; this is version 1."""
    name: str = ""
    description: str = ""
    settings: Settings = Field(default_factory=Settings)
    trust_anchors: dict[Name, TrustAnchor] = Field(default_factory=dict)
    """Keys that may issue root grants."""
    tenants: dict[Name, Tenant] = Field(default_factory=dict)
    principals: dict[Name, Principal] = {}
    tools: dict[str, Tool] = Field(default_factory=dict)
    """Tool name (e.g. ``payments.refund``) -> declaration."""
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    """Model name (e.g. ``llama-3.1-8b``) -> declaration."""
    gpus: dict[str, GpuType] = Field(default_factory=dict)
    """GPU type (lower case, as in ``gpu:h100``) -> price; types not declared lease free of charge."""
    priority_classes: dict[Name, PriorityClass] = Field(default_factory=dict)
    roles: dict[Name, Role] = {}
    quotas: dict[Name, Quota] = Field(default_factory=dict)
    approvals: dict[Name, ApprovalGate] = {}
    """Approval gates by name."""
