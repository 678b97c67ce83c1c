"""Backoff: how long to wait before retry n.

Exponential backoff with full jitter (the AWS Architecture Blog's "Exponential Backoff and
Jitter"): retry n waits ``uniform(0, min(cap, base * multiplier ** (n - 1)))``. Full jitter
spreads the retries of many callers that failed together, so they do not hit the tool again in
lockstep. The random source is injectable so that tests can reproduce the delays exactly.
"""

from __future__ import annotations

import random

from agentgate.tasks._config import RetryPolicy


def backoff_bound(policy: RetryPolicy, retry: int) -> float:
    """The upper bound of the wait before retry ``retry`` (1 = the first retry)."""
    return min(policy.backoff_max_s, policy.backoff_initial_s * policy.multiplier ** (retry - 1))


def full_jitter(policy: RetryPolicy, retry: int, rng: random.Random) -> float:
    """A wait drawn uniformly from ``[0, backoff_bound(policy, retry)]``."""
    return rng.uniform(0.0, backoff_bound(policy, retry))
