"""Review R88: ``backoff_bound`` and ``full_jitter`` (public, ``agentgate.tasks``) said they never
raise, but a retry number past about 1e308, or below -1e308, raised a bare ``OverflowError`` (the
growth was ``(retry - 1) * log(multiplier)`` in floats). A retry past the cap's now gives the
cap, and one that is not an integer of at least 1 is refused with ``InputError``.

Real components: ``RetryPolicy``, ``backoff_bound`` and ``full_jitter``."""

from __future__ import annotations

import random

import pytest

from agentgate.errors import InputError
from agentgate.tasks import RetryPolicy, backoff_bound, full_jitter

_POLICY = RetryPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=60.0, multiplier=2.0)
_SLOWEST = RetryPolicy(attempts=3, backoff_initial_s=5e-324, backoff_max_s=86_400.0, multiplier=1.0 + 2**-52)


@pytest.mark.parametrize("retry", [10**400, 2**64 + 1, 10**5000], ids=["1e400", "2**64+1", "5000-digits"])
def test_a_retry_past_any_float_is_at_the_cap(retry: int) -> None:
    assert backoff_bound(_POLICY, retry) == 60.0
    assert backoff_bound(_SLOWEST, retry) == 86_400.0
    assert 0.0 <= full_jitter(_POLICY, retry, random.Random(1)) <= 60.0


def test_the_early_retries_are_as_before() -> None:
    assert [backoff_bound(_POLICY, n) for n in (1, 2, 3, 6, 7)] == [1.0, 2.0, 4.0, 32.0, 60.0]


@pytest.mark.parametrize(
    "retry",
    [0, -1, -(10**400), True, 1.5, "2", None],
    ids=["0", "-1", "-1e400", "True", "1.5", "text", "None"],
)
def test_a_retry_number_that_is_not_an_integer_from_one_is_refused(retry: object) -> None:
    with pytest.raises(InputError, match="a backoff's retry number is an integer >= 1, got "):
        backoff_bound(_POLICY, retry)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="a backoff's retry number is an integer >= 1, got "):
        full_jitter(_POLICY, retry, random.Random(1))  # type: ignore[arg-type]
