"""Classifier inputs of the wrong kind are an ``InputError`` naming them when the classifier, the
chain or the scheduler is made (review R86: they ended in a bare ``TypeError`` or
``AttributeError``, or were taken and every failure was then classed ``error``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Classifier,
    Scheduler,
    SchedulerConfig,
    by_attribute,
    from_function,
)


class NoOwnClasses(Classifier):
    classes = None  # type: ignore[assignment]

    def __call__(self, error: BaseException) -> str | None:
        return None


class Quota(Classifier):
    classes = frozenset({"quota"})

    def __call__(self, error: BaseException) -> str | None:
        return "quota" if isinstance(error, LookupError) else None


def test_a_subclass_whose_classes_is_none_is_refused_by_the_scheduler() -> None:
    with pytest.raises(InputError, match=r"classifier NoOwnClasses\.classes: .* got None"):
        Scheduler(SchedulerConfig(), classifier=NoOwnClasses())


def test_a_subclass_whose_classes_is_none_is_refused_in_a_chain() -> None:
    with pytest.raises(InputError, match=r"NoOwnClasses\.classes"):
        NoOwnClasses() | DEFAULT_CLASSIFIER


@pytest.mark.parametrize("other", [lambda error: "transient", None, "transient"])
def test_a_chain_with_something_other_than_a_classifier_is_refused(other: Any) -> None:
    with pytest.raises(InputError, match="a classifier chains with classifiers only"):
        DEFAULT_CLASSIFIER | other
    with pytest.raises(InputError, match="a classifier chains with classifiers only"):
        other | DEFAULT_CLASSIFIER


@pytest.mark.parametrize("function", [None, "transient", 3])
def test_from_function_needs_something_it_can_call(function: Any) -> None:
    with pytest.raises(InputError, match="from_function needs a function"):
        from_function(function)


def test_by_attribute_needs_an_attribute_name() -> None:
    with pytest.raises(InputError, match="by_attribute name must be"):
        by_attribute(None)  # type: ignore[arg-type]


def test_classifiers_of_the_right_kind_chain_and_declare_their_classes() -> None:
    chain = Quota() | from_function(lambda error: None) | DEFAULT_CLASSIFIER
    assert chain.classes == {"quota"}
    assert chain(KeyError()) == "quota"
    assert chain(ConnectionRefusedError()) == "transient"
    Scheduler(SchedulerConfig(), classifier=chain)
