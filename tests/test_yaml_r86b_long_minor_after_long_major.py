"""Review R86 (found reviewing R86's YAML fixes): a ``%YAML`` version whose major number has ten
digits and whose minor number has more than 4,300, which Python refuses to convert, was said to
be "a character escape beyond U+10FFFF" at the minor's first digit: only a number that was
itself the first of more than nine digits was known as a long version. It is now refused at
the major's tenth digit, where libyaml refuses it, as a place the parsers disagree on, on both
parsers and in a file under or over 16 KiB (agentgate/_yaml.py, ``_long_version_at``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

PADDING = "# " + "x" * 20_000 + "\n"
"""A comment that takes a file past the 16 KiB above which its nodes are counted first."""


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("after", ["", PADDING])
@pytest.mark.parametrize(
    ("version", "column"),
    [
        ("1234567890." + "0" * 5000 + "2", 16),  # the major's tenth digit
        ("123." + "0" * 5000 + "2", 20),  # the minor's
        ("1" * 5000 + ".2", 16),
    ],
)
def test_a_version_python_cannot_convert_is_refused_at_its_first_long_numbers_tenth_digit(
    version: str, column: int, after: str
) -> None:
    error = _error(f"%YAML {version}\n--- x\n{after}")
    assert error.message.startswith("a %YAML directive's version number of more than nine digits")
    assert (error.line, error.column) == (1, column)
    assert len(str(error)) < 400


@pytest.mark.usefixtures("parser")
def test_an_escape_in_quoted_text_on_a_line_starting_like_a_directive_is_still_an_escape() -> None:
    error = _error('"x\n%YAML 1.\\U00110000"\n')  # a line of quoted text, no directive
    assert "beyond U+10FFFF" in error.message, error.message
    assert (error.line, error.column) == (2, 11)
