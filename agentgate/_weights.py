"""The largest fair-queueing weight, below both the policy schema, which refuses a priority
class weighted more where the file says it, and the scheduler's configuration, which refuses one
built in code: one constant, read by both (until review R84 a policy loaded such a class, and the
Gate was refused when it built its scheduler from it)."""

from __future__ import annotations

MAX_WEIGHT = 1_000_000
"""Largest fair-queueing weight of a ``TenantShare`` or a ``PriorityClass``. Weights count only
relative to each other, and the fair queue counts in integer strides, ``720720 * 2**32 / weight``
rounded (``tasks/_fair.py``): up to this weight a stride is over 3e9, so its rounding moves a
share by less than one call in six billion; above about 3e15 every weight had the stride 1, and
tenants of weight 4e15 and 8e15 shared equally."""
