"""Backoff: how long to wait before retry n.

Exponential backoff with full jitter (the AWS Architecture Blog's "Exponential Backoff and
Jitter"): retry n waits ``uniform(0, min(cap, base * multiplier ** (n - 1)))``. Full jitter
spreads the retries of many callers that failed together, so they do not hit the tool again in
lockstep. The random source is injectable so that tests can reproduce the delays exactly.
"""

from __future__ import annotations

import math
import random

from agentgate.tasks._config import RetryPolicy

#: ``multiplier ** n`` stays a finite float while ``n * log(multiplier)`` is below this.
_EXP_SAFE = 700.0


def backoff_bound(policy: RetryPolicy, retry: int) -> float:
    """The upper bound of the wait before retry ``retry`` (1 = the first retry).

    Never raises: past the retry where the exponential reaches the cap, the cap is the bound (a
    float power would overflow after about a thousand doublings)."""
    initial, cap, multiplier = policy.backoff_initial_s, policy.backoff_max_s, policy.multiplier
    if initial == 0.0 or multiplier == 1.0 or initial >= cap:
        return min(cap, initial)
    growth = (retry - 1) * math.log(multiplier)
    if math.log(initial) + growth >= math.log(cap):  # compared in logs: never overflows
        return cap
    if growth < _EXP_SAFE:
        return min(cap, initial * multiplier ** (retry - 1))
    return min(cap, math.exp(math.log(initial) + growth))


def full_jitter(policy: RetryPolicy, retry: int, rng: random.Random) -> float:
    """A wait drawn uniformly from ``[0, backoff_bound(policy, retry)]``."""
    return rng.uniform(0.0, backoff_bound(policy, retry))
