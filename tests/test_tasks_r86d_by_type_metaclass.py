"""``by_type`` tries every key once when it is made, an exception class included: one whose
metaclass's ``__instancecheck__`` reads an attribute a bare ``BaseException`` lacks (``errno``) is
an ``InputError`` naming it, alone, in a tuple or in a union. Until
review R86d (since R86c) such a class was taken unprobed, and on any error without that
attribute the classifier raised ``AttributeError``: the failure was classed ``error``, the later
keys and the classifiers chained after it never reached."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import DEFAULT_CLASSIFIER, by_type


class _ByErrno(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return bool(instance.errno == 5)  # every OSError has errno; a ValueError has not


class DiskError(OSError, metaclass=_ByErrno):
    pass


@pytest.mark.parametrize(
    "key",
    [DiskError, (DiskError, ConnectionError), ConnectionError | DiskError],
    ids=["class", "tuple", "union"],
)
def test_an_exception_class_whose_check_raises_on_a_probe_is_refused_naming_it(key: Any) -> None:
    with pytest.raises(InputError, match="by_type mapping: a key is an exception class") as caught:
        by_type({key: "disk", ValueError: "transient"})
    assert caught.match(r"DiskError")
    assert caught.match(r" \(its isinstance check raised AttributeError\)$")


def test_plain_exception_classes_are_still_taken_and_classify() -> None:
    classifier = by_type({ValueError: "transient", (KeyError, IndexError): "lookup"}) | DEFAULT_CLASSIFIER
    assert classifier(ValueError("v")) == "transient"
    assert classifier(IndexError()) == "lookup"
    assert classifier(TimeoutError()) == "timeout"
    assert classifier.classes == {"lookup"}
