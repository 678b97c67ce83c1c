"""Review R88 (second fix): R88 made ``backoff_bound`` and ``full_jitter`` check that the retry
number is an ``int`` (``isinstance``), which refused with ``InputError`` the numpy integers they
answered before. Rule: any integer ``operator.index`` takes is read as its ``int``; a bool, and a
float even when whole (``2.0``, which the docs never allowed), are still refused.

Real components: ``RetryPolicy``, ``backoff_bound`` and ``full_jitter``."""

from __future__ import annotations

import random

import pytest

from agentgate.errors import InputError
from agentgate.tasks import RetryPolicy, backoff_bound, full_jitter

_POLICY = RetryPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=60.0, multiplier=2.0)


class Integer:
    """An integer type of its own, as numpy's are: not an ``int``, but ``operator.index`` takes it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_an_integer_that_operator_index_takes_is_read_as_its_int() -> None:
    assert backoff_bound(_POLICY, Integer(3)) == 4.0  # type: ignore[arg-type]
    assert backoff_bound(_POLICY, Integer(10**400)) == 60.0  # type: ignore[arg-type]
    assert full_jitter(_POLICY, Integer(3), random.Random(1)) == full_jitter(_POLICY, 3, random.Random(1))  # type: ignore[arg-type]


def test_a_numpy_integer_is_read_as_its_int() -> None:
    numpy = pytest.importorskip("numpy")
    assert backoff_bound(_POLICY, numpy.int64(3)) == 4.0
    assert backoff_bound(_POLICY, numpy.uint64(2**64 - 1)) == 60.0
    assert full_jitter(_POLICY, numpy.int32(2), random.Random(1)) == full_jitter(_POLICY, 2, random.Random(1))


@pytest.mark.parametrize("retry", [Integer(0), Integer(-5), 2.0, True], ids=["0", "-5", "2.0", "True"])
def test_below_one_a_float_or_a_bool_is_still_refused(retry: object) -> None:
    with pytest.raises(InputError, match="a backoff's retry number is an integer >= 1, got "):
        backoff_bound(_POLICY, retry)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="a backoff's retry number is an integer >= 1, got "):
        full_jitter(_POLICY, retry, random.Random(1))  # type: ignore[arg-type]
