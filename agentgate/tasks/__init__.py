"""The tool-call scheduler: priority, tenant fairness, limits, deadlines, safe retries, breakers.

``Scheduler`` is the async core, ``SyncScheduler`` the facade for threads; both take a
``SchedulerConfig`` (built from the policy's tool section) and run ``ToolCall``s; schedulers
given one ``SharedLimits`` enforce one set of limits together (a Gate's sync and async paths). docs/tasks.md
explains the concepts, the fairness algorithm and the retry safety rules.
"""

from __future__ import annotations

from agentgate.store.dead_letters import AttemptError, DeadLetter
from agentgate.tasks._backoff import backoff_bound, full_jitter
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._call import Attempt, ToolCall, argument_digest, idempotency_key
from agentgate.tasks._classify import (
    DEFAULT_CLASSIFIER,
    Classifier,
    always,
    by_attribute,
    by_type,
    from_function,
    httpx_errors,
)
from agentgate.tasks._config import (
    AMBIGUOUS_CLASSES,
    ERROR_CLASSES,
    BreakerPolicy,
    PriorityClass,
    RateLimit,
    RetryPolicy,
    SchedulerConfig,
    TenantShare,
    ToolLimits,
)
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._retry import (
    Failure,
    RetryRule,
    attempts_left,
    retry_on_classes,
    rule_for,
    safe_to_repeat,
)
from agentgate.tasks._scheduler import Scheduler, settled
from agentgate.tasks._sync import SyncScheduler
from agentgate.tasks._token_bucket import TokenBucket

__all__ = [
    "AMBIGUOUS_CLASSES",
    "DEFAULT_CLASSIFIER",
    "ERROR_CLASSES",
    "Attempt",
    "AttemptError",
    "BreakerPolicy",
    "BreakerSnapshot",
    "BreakerState",
    "CircuitBreaker",
    "Classifier",
    "DeadLetter",
    "Failure",
    "PriorityClass",
    "RateLimit",
    "RetryPolicy",
    "RetryRule",
    "Scheduler",
    "SchedulerConfig",
    "SharedLimits",
    "SyncScheduler",
    "TenantShare",
    "TokenBucket",
    "ToolCall",
    "ToolLimits",
    "always",
    "argument_digest",
    "attempts_left",
    "backoff_bound",
    "by_attribute",
    "by_type",
    "from_function",
    "full_jitter",
    "httpx_errors",
    "idempotency_key",
    "retry_on_classes",
    "rule_for",
    "safe_to_repeat",
    "settled",
]
