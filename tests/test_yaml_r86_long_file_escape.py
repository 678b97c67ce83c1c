"""Review R86 (found fixing R86's YAML defects): review R82 refused a ``\\U`` escape above
U+10FFFF at the escape, but only in a file of at most 16 KiB. A longer one is parsed once first
to count its nodes, and a parser that failed there was not the one the handler looked at:
Python's ``OverflowError`` or ``ValueError`` came out bare, on either parser. It is now the same
``PolicyError`` at the escape (agentgate/_yaml.py, ``_composed``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml

PADDING = "# " + "x" * 20_000 + "\n"
"""A comment that takes a file past the 16 KiB above which its nodes are counted first."""


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("escape", ["\\U00110000", "\\UFFFFFFFF", "\\U7FFFFFFF"])
@pytest.mark.parametrize(("before", "after", "line"), [("", PADDING, 2), (PADDING, "", 3)])
def test_an_escape_beyond_the_last_code_point_in_a_long_file_is_refused_at_it(
    escape: str, before: str, after: str, line: int
) -> None:
    error = _error(f'{before}version: 1\nname: "{escape}"\n{after}')
    assert "beyond U+10FFFF" in error.message, error.message
    assert (error.line, error.column) == (line, 10)


@pytest.mark.usefixtures("parser")
def test_the_last_code_point_in_a_long_file_still_loads() -> None:
    data, _ = load_yaml(f'a: "\\U0010FFFF"\n{PADDING}', source="p.yaml")
    assert data == {"a": "\U0010ffff"}
