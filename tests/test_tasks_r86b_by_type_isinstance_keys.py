"""``by_type`` takes every key ``isinstance`` takes: a tuple of exception classes, a union and an
ABC with an exception class registered classify as they did before review R86, whose check
refused anything but a ``BaseException`` subclass (review R86b); a key ``isinstance`` cannot use
is still refused when the mapping is made, quoted short."""

from __future__ import annotations

import abc
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import DEFAULT_CLASSIFIER, by_type


class Retryable(abc.ABC):  # noqa: B024 (an ABC that only registers classes, as isinstance reads it)
    pass


Retryable.register(TimeoutError)


@pytest.mark.parametrize("key", [(TimeoutError, OSError), TimeoutError | ConnectionError, Retryable])
def test_a_key_isinstance_takes_classifies(key: Any) -> None:
    classifier = by_type({key: "slow"}) | DEFAULT_CLASSIFIER
    assert classifier(TimeoutError()) == "slow"
    assert classifier(ValueError()) == "error"
    assert classifier.classes == {"slow"}


def test_a_tuple_nested_too_deep_for_isinstance_is_refused() -> None:
    key: Any = TimeoutError
    for _ in range(5_000):  # past the recursion limit isinstance checks a tuple against
        key = (key,)
    with pytest.raises(InputError, match="by_type mapping: a key is an exception class") as caught:
        by_type({key: "timeout"})
    assert len(str(caught.value)) < 300


def test_a_refused_key_is_quoted_short() -> None:
    with pytest.raises(InputError, match="by_type mapping: a key is") as caught:
        by_type({"x" * 10_000_000: "timeout"})
    assert len(str(caught.value)) < 300
