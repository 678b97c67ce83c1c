"""``by_type`` maps what ``isinstance`` takes (exception classes, tuples and unions of them, ABCs)
to error classes: a key ``isinstance`` refuses is refused with ``InputError`` when the mapping is
made (review R86: a type's name as a key was taken, and every classification raised inside
``isinstance``, so the whole chain classed each failure ``error``: no retries, no breaker trips).
The tuple, union and ABC keys that classified before stay accepted (review R86b)."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import DEFAULT_CLASSIFIER, by_type


class QuotaExceeded(Exception): ...


@pytest.mark.parametrize("key", ["TimeoutError", None, 3, list[int], (TimeoutError, "OSError")])
def test_a_key_isinstance_cannot_use_is_refused_naming_it(key: Any) -> None:
    with pytest.raises(InputError, match=r"by_type mapping: a key is an exception class") as caught:
        by_type({QuotaExceeded: "quota", key: "timeout"})
    assert repr(key) in str(caught.value)


def test_a_mapping_of_another_kind_is_refused() -> None:
    with pytest.raises(InputError, match="by_type mapping: give a mapping"):
        by_type([(QuotaExceeded, "quota")])  # type: ignore[arg-type]


def test_an_error_class_that_is_not_a_name_is_refused() -> None:
    with pytest.raises(InputError, match="by_type mapping: an error class is a non-empty string"):
        by_type({QuotaExceeded: 3})  # type: ignore[dict-item]


def test_a_well_formed_mapping_classifies_and_leaves_the_rest_to_the_chain() -> None:
    classifier = by_type({QuotaExceeded: "quota", KeyboardInterrupt: "stop"}) | DEFAULT_CLASSIFIER
    assert classifier(QuotaExceeded()) == "quota"
    assert classifier(ConnectionRefusedError()) == "transient"
    assert classifier.classes == {"quota", "stop"}
