"""The scheduler's configuration from a policy."""

from __future__ import annotations

from agentgate.policy import Policy
from agentgate.tasks import RateLimit, RetryPolicy, SchedulerConfig, ToolLimits

GATE_RESULTS_KEPT = 1_024
"""``SchedulerConfig.result_cache_size`` of a Gate's schedulers."""


def scheduler_config(policy: Policy) -> SchedulerConfig:
    """The scheduler's per-tool limits, one to one from the policy's ``tools`` section."""
    tools: dict[str, ToolLimits] = {}
    for name, tool in policy.document.tools.items():
        retry = tool.retry
        tools[name] = ToolLimits(
            concurrency=tool.concurrency,
            rate=RateLimit(tool.rate.per_second, tool.rate.burst) if tool.rate else None,
            timeout_s=tool.timeout_s,
            retry=RetryPolicy(
                attempts=retry.attempts,
                backoff_initial_s=retry.backoff_initial_s,
                backoff_max_s=max(retry.backoff_max_s, retry.backoff_initial_s),
                multiplier=retry.multiplier,
                retry_on=tuple(retry.retry_on),
            ),
            idempotent=tool.idempotent,
            takes_idempotency_key=tool.takes_idempotency_key,
        )
    # The results of the last 1,024 calls whose tool may run again are kept for a twin or a repeat
    # of the same call (``reuse_result``), not 10,000: a tool's output (a page, a file) can be
    # large, and a long-running agent service keeps one such cache per event loop.
    return SchedulerConfig(tools=tools, result_cache_size=GATE_RESULTS_KEPT)
