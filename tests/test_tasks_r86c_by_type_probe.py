"""``by_type`` takes a tuple or union when each part is usable; any other key is tried once, and a
key whose own check raises anything is an ``InputError`` naming it (an exception class whose
metaclass reads an attribute a probe lacks included, since review R86d: see
tests/test_tasks_r86d_by_type_metaclass.py). Until review R86c only ``TypeError`` and ``RecursionError`` were caught
around the probe: a key's ``ValueError`` came out bare, such an exception class was refused with
an ``AttributeError`` at construction, and a tuple whose first part matched the probe was taken
whatever came after it."""

from __future__ import annotations

import abc
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import by_type


class _RaisesValue:
    def __instancecheck__(self, instance: object) -> bool:
        raise ValueError("boom")


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
