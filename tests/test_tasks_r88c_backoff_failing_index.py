"""A backoff's retry number whose ``__index__`` fails (review R88, third regression pass).

Review R88 read the retry number with ``operator.index`` so that a numpy integer is one, and
caught only the ``TypeError`` of a value that is no integer. ``operator.index`` raises whatever
the object's own ``__index__`` raises: a ``ValueError`` or an ``OverflowError`` came out of
``backoff_bound`` and ``full_jitter`` bare. Each is now the ``InputError`` any non-integer gets."""

from __future__ import annotations

import random

import pytest

from agentgate.errors import InputError
from agentgate.tasks import RetryPolicy, backoff_bound
from agentgate.tasks._backoff import full_jitter

POLICY = RetryPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=60.0, multiplier=2.0)


class _FailingIndex:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __index__(self) -> int:
        raise self.error


class _Three:
    def __index__(self) -> int:
        return 3


FAILURES = [ValueError("boom"), OverflowError("too big"), RuntimeError("broken")]


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
def test_backoff_bound_refuses_a_retry_whose_index_fails(error: Exception) -> None:
    with pytest.raises(InputError, match=r"a backoff's retry number is an integer >= 1, got a _FailingIndex"):
        backoff_bound(POLICY, _FailingIndex(error))  # type: ignore[arg-type]


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
def test_full_jitter_refuses_a_retry_whose_index_fails(error: Exception) -> None:
    with pytest.raises(InputError, match=r"a backoff's retry number is an integer >= 1"):
        full_jitter(POLICY, _FailingIndex(error), random.Random(0))  # type: ignore[arg-type]


def test_an_object_whose_index_answers_is_still_a_retry_number() -> None:
    assert backoff_bound(POLICY, _Three()) == 4.0  # type: ignore[arg-type]
