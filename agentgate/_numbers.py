"""Numbers in settings and stored values: ``is_number`` (an ``int`` or a ``float``, a bool is
neither), ``finite`` (one a float holds, finite) and the two range checks of the dispatcher's
settings built on it, ``check_positive_finite`` and ``check_finite_non_negative``. The one reading
of a number for the dispatcher's settings (``dispatch``), the broker's values (``dispatch.broker``),
the broker's stored rows (``store.broker_leases``) and the simulator's settings (``sim``), which
each had their own copy until review R84. And the least decode rate a backend's timeouts take
(``LEAST_DECODE_RATE``), here where ``agentgate serve``'s flag reads it without importing the
dispatcher."""

from __future__ import annotations

import math
from typing import TypeGuard

from agentgate._shown import quoted
from agentgate.errors import InputError

LEAST_DECODE_RATE = 0.001
"""The slowest decode (tokens a second) ``Timeouts.decode_tokens_per_s`` and ``agentgate serve
--decode-tokens-per-s`` take: an output limit of up to ``MAX_USAGE_TOKENS`` (10**9) at it, plus a
day's first token, keeps a whole answer's and a stream's deadline (``Timeouts.answer_s``,
``stream_s``) near 10**12 s, which every timer takes (uvloop's refuse past 2**63 ms). Until review R89 any positive rate passed
the flag, and until a regression review of R89 ``Timeouts``: ``1e-320`` made a stream's deadline
infinite, and its bound in all never fired."""


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or a ``float`` (not a ``bool``), for a range check of a
    setting to judge (the simulator's server and replay take ``inf`` for some)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or a ``float`` (a bool is neither) that a float holds,
    finite: an integer too large for a float (``10**400``) is not, where ``math.isfinite`` raises
    ``OverflowError`` on it, and the first sum with a float (a bucket's refill, a deadline, an
    ``asyncio.sleep``) would raise it too."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_positive_finite(value: object, name: str) -> None:
    """Raise ``InputError`` naming ``name`` unless ``value`` is a positive finite ``int`` or
    ``float`` (a bool is none): 0 would spin the event loop as an interval, NaN never sleeps or
    fires, and text failed the first call that read it with an untyped ``TypeError``. The one
    check of the dispatcher's settings, its timeouts and its tenants' quotas (review R83: there
    were three, and the timeouts' let text through to a ``TypeError``)."""
    if not finite(value) or not value > 0:
        raise InputError(f"{name} must be positive and finite, got {quoted(value)}")


def check_finite_non_negative(value: object, name: str) -> None:
    """Raise ``InputError`` naming ``name`` unless ``value`` is a finite ``int`` or ``float`` >= 0
    (a bool is none): the dispatcher's cooldown and recovery wait, the router's tolerances."""
    if not finite(value) or not value >= 0:
        raise InputError(f"{name} must be a finite number >= 0, got {quoted(value)}")
