"""``SchedulerConfig.check_error_classes(declared)`` takes a collection of non-empty strings, as a
classifier's ``classes`` is checked, and refuses anything else with ``InputError`` quoting the
wrong entry in a line; the messages that list names (the known classes, the priority classes that
repeat, those ``default_priority`` or a call may name) quote each name and list the first ten.
Until review R86d ``[1]``, ``[10**5000]`` or a nested tuple raised a bare ``TypeError``, and a
5 MB declared name, or 100,000 priority classes, made a message of megabytes."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import PriorityClass, RetryPolicy, SchedulerConfig, ToolLimits

BIG = 10**5000


def _config() -> SchedulerConfig:
    return SchedulerConfig(tools={"t": ToolLimits(retry=RetryPolicy(retry_on=("quota",)))})


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ([1], "an error class is a non-empty string, got 1$"),
        ([""], "an error class is a non-empty string, got ''$"),
        ([BIG], "an error class is a non-empty string, got an integer of 16610 bits$"),
        ([("a",) * 100_000], r"an error class is a non-empty string, got \('a', 'a'"),
        (None, "give a tuple of error class names, got None$"),
        ("quota", "give a tuple of error class names, got the string 'quota'$"),
    ],
    ids=["int", "empty", "huge int", "nested tuple", "None", "string"],
)
def test_declared_classes_that_are_not_names_are_an_input_error(declared: Any, said: str) -> None:
    with pytest.raises(InputError, match=r"^scheduler configuration: declared error classes: ") as caught:
        _config().check_error_classes(declared)
    assert caught.match(said)
    assert len(str(caught.value)) < 300


def test_the_known_classes_listed_are_quoted_and_cut() -> None:
    declared = ["x" * 5_000_000, *(f"class{i}" for i in range(100))]
    with pytest.raises(InputError, match=r"'quota' is not an error class the classifier returns") as caught:
        _config().check_error_classes(declared)
    assert caught.match(r"\(known: \['class0', 'class1', .*, and 95 more\]; a custom classifier")
    assert len(str(caught.value)) < 1000
    _config().check_error_classes(("quota",))


def test_priority_class_lists_are_cut() -> None:
    many = tuple(PriorityClass("p" * 1_000_000 + str(i)) for i in range(20))
    with pytest.raises(InputError, match=r"priority class names repeat: \['a'\]$"):
        SchedulerConfig(
            priority_classes=(PriorityClass("a"), PriorityClass("b"), PriorityClass("a")),
            default_priority="b",
        )
    with pytest.raises(
        InputError, match=r"default_priority 'default' is not one of \['ppp.*, and 10 more\]$"
    ) as caught:
        SchedulerConfig(priority_classes=many)
    assert len(str(caught.value)) < 1000
    config = SchedulerConfig(priority_classes=many, default_priority=many[0].name)
    with pytest.raises(
        InputError, match=r"unknown priority class 'urgent'; known: \[.*, and 10 more\]$"
    ) as caught:
        config.priority_class("urgent")
    assert len(str(caught.value)) < 1000
