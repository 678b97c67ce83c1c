"""``finite``: whether a setting or a stored value is a number a float holds, finite: the one
reading of it for the dispatcher's settings (``dispatch.quota``), the broker's values
(``dispatch.broker``) and the broker's stored rows (``store.broker_leases``), which each had their
own copy until review R84."""

from __future__ import annotations

import math
from typing import TypeGuard


def finite(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or a ``float`` (a bool is neither) that a float holds,
    finite: an integer too large for a float (``10**400``) is not, where ``math.isfinite`` raises
    ``OverflowError`` on it, and the first sum with a float (a bucket's refill, a deadline, an
    ``asyncio.sleep``) would raise it too."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
