"""Review R86: an error that quotes the file's own text (an ambiguous number, an alias's or an
anchor's name, a tag handle, a ``%YAML`` version) quoted it whole, so one error line could be a
megabyte long; it is now cut, on either parser (agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

LONG = 200_000

QUOTING = [
    ("version: 1\nname: 09" + "9" * LONG + "\n", "ambiguous number '0999", (2, 7)),
    ("version: 1\nname: *" + "a" * LONG + "\n", "found undefined alias 'aaa", (2, 7)),
    (
        "version: 1\nname: &" + "a" * LONG + " x\ndescription: &" + "a" * LONG + " y\n",
        "found duplicate anchor 'aaa",
        (3, 14),
    ),
    ("version: 1\nname: !" + "a" * LONG + "!x y\n", "found undefined tag handle '!aaa", (2, 7)),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "said", "where"), QUOTING)
def test_an_error_quoting_the_files_text_stays_short(text: str, said: str, where: tuple[int, int]) -> None:
    """Review R86: each was an error of 200,000 characters and more; the text is cut, the error
    still says what it found and where."""
    error = _error(text)
    assert said in error.message and (error.line, error.column) == where, error.message
    assert len(str(error)) < 600 and "\n" not in str(error), len(str(error))


def test_the_first_occurrence_of_a_duplicate_anchor_is_still_named() -> None:
    """The cut keeps the start and the end of what PyYAML says: where the anchor was first."""
    error = _error("a: &" + "a" * LONG + " x\nb: &" + "a" * LONG + " y\n")
    assert "first occurrence at line 1, column 4: second occurrence" in error.message, error.message
    assert len(error.message) < 300, len(error.message)
