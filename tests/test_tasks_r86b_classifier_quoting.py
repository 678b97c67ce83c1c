"""A classifier input refused for its kind is quoted short, as ``quoted`` quotes it: an integer
past 4,300 digits, a list nested 100,000 deep and 10 MB of text are each an ``InputError`` of a
line, where the refusal wrote the whole ``repr`` and raised a bare ``ValueError`` or
``RecursionError``, or held all 10 MB (review R86b)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import always, by_attribute, by_type, from_function

BIG = 10**5000


def _deep() -> list[Any]:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    return deep


REFUSED: list[tuple[str, Callable[[], object], str]] = [
    ("by_type key", lambda: by_type({BIG: "timeout"}), "by_type mapping: a key is"),
    ("by_attribute name", lambda: by_attribute(BIG), "by_attribute name must be"),  # type: ignore[arg-type]
    ("by_attribute classes", lambda: by_attribute(classes=[b"x" * 10_000_000]), "an error class is"),  # type: ignore[list-item]
    ("from_function huge", lambda: from_function(BIG), "from_function needs a function"),  # type: ignore[arg-type]
    ("from_function deep", lambda: from_function(_deep()), "from_function needs a function"),  # type: ignore[arg-type]
    ("from_function classes", lambda: from_function(print, classes=BIG), "give a tuple of error class names"),  # type: ignore[arg-type]
    ("classes as text", lambda: from_function(print, classes="q" * 10_000_000), "got the string"),
    ("chained after", lambda: always("error") | BIG, "chains with classifiers only"),  # type: ignore[operator]
    ("chained before", lambda: BIG | always("error"), "chains with classifiers only"),  # type: ignore[operator]
    ("chained deep", lambda: always("error") | _deep(), "chains with classifiers only"),  # type: ignore[operator]
]


@pytest.mark.parametrize(
    ("make", "says"), [(make, says) for _, make, says in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_hostile_classifier_input_is_refused_in_a_short_message(
    make: Callable[[], object], says: str
) -> None:
    with pytest.raises(InputError, match=says) as caught:
        make()
    message = str(caught.value)
    assert len(message) < 200
    assert "\n" not in message


def test_a_huge_integer_is_named_by_its_size() -> None:
    with pytest.raises(InputError, match=r"got an integer of \d+ bits"):
        from_function(BIG)  # type: ignore[arg-type]
