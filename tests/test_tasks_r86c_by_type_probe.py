"""``by_type`` takes an exception class as it is, even one whose metaclass's ``__instancecheck__``
reads an attribute every error of its kind has (a probe lacks it), and a tuple or union when each
part is usable; any other key is tried once, and a key whose own check raises anything is an
``InputError`` naming it. Until review R86c only ``TypeError`` and ``RecursionError`` were caught
around the probe: a key's ``ValueError`` came out bare, such an exception class was refused with
an ``AttributeError`` at construction, and a tuple whose first part matched the probe was taken
whatever came after it."""

from __future__ import annotations

import abc
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import DEFAULT_CLASSIFIER, by_type


class _RaisesValue:
    def __instancecheck__(self, instance: object) -> bool:
        raise ValueError("boom")


class _ByErrno(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return bool(instance.errno == 5)  # every OSError has errno; a bare BaseException has not


class DiskError(OSError, metaclass=_ByErrno):
    pass


class _ByDeclaredAttribute(abc.ABC):  # noqa: B024 (an ABC that only answers isinstance)
    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        return bool(other.retryable)  # type: ignore[attr-defined]  # fails on any class without it


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (_RaisesValue(), r" \(its isinstance check raised ValueError\)$"),
        (_ByDeclaredAttribute, r" \(its isinstance check raised AttributeError\)$"),
        ((OSError, _RaisesValue()), r" \(its isinstance check raised ValueError\)$"),
        ((BaseException, "x"), r"got \(<class 'BaseException'>, 'x'\)$"),
        ((TimeoutError, (ConnectionError, None)), "got "),
    ],
    ids=["raises ValueError", "ABC hook raises", "in a tuple", "text after a match", "None nested"],
)
def test_a_key_whose_check_fails_is_refused_naming_it(key: Any, why: str) -> None:
    with pytest.raises(InputError, match="by_type mapping: a key is an exception class") as caught:
        by_type({key: "transient"})
    assert caught.match(why)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    "key",
    [DiskError, (DiskError, ConnectionError), DiskError | ConnectionError],
    ids=["class", "tuple", "union"],
)
def test_an_exception_class_whose_metaclass_reads_an_attribute_is_taken_and_classifies(key: Any) -> None:
    classifier = by_type({key: "disk"}) | DEFAULT_CLASSIFIER
    assert classifier(OSError(5, "I/O error")) == "disk"
    assert classifier(OSError(2, "no such file")) == "error"
    assert classifier.classes == {"disk"}
