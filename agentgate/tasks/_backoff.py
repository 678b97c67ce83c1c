"""Backoff: how long to wait before retry n.

Exponential backoff with full jitter (the AWS Architecture Blog's "Exponential Backoff and
Jitter"): retry n waits ``uniform(0, min(cap, base * multiplier ** (n - 1)))``. Full jitter
spreads the retries of many callers that failed together, so they do not hit the tool again in
lockstep. The random source is injectable so that tests can reproduce the delays exactly.
"""

from __future__ import annotations

import math
import operator
import random

from agentgate._shown import shown
from agentgate.errors import InputError
from agentgate.tasks._config import RetryPolicy

#: ``multiplier ** n`` stays a finite float while ``n * log(multiplier)`` is below this.
_EXP_SAFE = 700.0

#: Retries past this many doublings' worth are all at the cap: a multiplier above 1 is at least
#: ``1 + 2**-52`` (its log about 2.2e-16), and a policy's cap over its initial wait is at most
#: ``MAX_BACKOFF_S / 5e-324`` (a log below 760), so ``2**64`` steps (growth past 4,000) pass it.
_STEPS_PAST_CAP = 2**64


def backoff_bound(policy: RetryPolicy, retry: int) -> float:
    """The upper bound of the wait before retry ``retry`` (1 = the first retry).

    ``retry`` is any integer ``operator.index`` takes (an ``int``, a numpy integer). Raises
    ``InputError`` for one below 1 and for anything else: a bool, and a float even when whole
    (``2.0``). For every other it returns: past the retry where the exponential reaches the cap,
    the cap is the bound (a float power would overflow after about a thousand doublings). Until
    review R88 a retry past about 1e308 (or below -1e308) raised a bare ``OverflowError``, though
    this said it never raised; R88's first fix took only an ``int``, and refused a numpy integer
    that was answered before it. An object whose ``__index__`` raises (a ``ValueError``, an
    ``OverflowError``) is refused too: until review R88's third regression pass only a
    ``TypeError`` was, and any other came out bare."""
    try:
        number = operator.index(retry)
    except Exception:  # not an integer, or a caller's ``__index__`` that fails: refused as one below 1 is
        number = 0
    if isinstance(retry, bool) or number < 1:
        raise InputError(f"a backoff's retry number is an integer >= 1, got {shown(retry)}")
    initial, cap, multiplier = policy.backoff_initial_s, policy.backoff_max_s, policy.multiplier
    if initial == 0.0 or multiplier == 1.0 or initial >= cap:
        return min(cap, initial)
    growth = min(number - 1, _STEPS_PAST_CAP) * math.log(multiplier)
    if math.log(initial) + growth >= math.log(cap):  # compared in logs: never overflows
        return cap
    if growth < _EXP_SAFE:
        return min(cap, initial * multiplier ** (number - 1))
    return min(cap, math.exp(math.log(initial) + growth))


def full_jitter(policy: RetryPolicy, retry: int, rng: random.Random) -> float:
    """A wait drawn uniformly from ``[0, backoff_bound(policy, retry)]``; raises ``InputError``
    as ``backoff_bound`` does."""
    return rng.uniform(0.0, backoff_bound(policy, retry))
