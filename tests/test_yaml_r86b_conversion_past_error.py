"""Review R86 (found reviewing R86's YAML fixes): where a parser refused a file and the file may
hold a place the parsers read apart (a '?' anywhere, a line starting with '%'), its tokens are
read again up to the error, and PyYAML's own scanner scans the token after it. Where that token
held a ``\\U`` escape beyond U+10FFFF or a ``%YAML`` version number of more than 4,300 digits,
Python's ``ValueError`` or ``OverflowError`` came out bare on either parser. The tokens now end
there as at the scanner's own error, and the file is refused where the parser stopped, as it is
without the '?' (agentgate/_yaml.py, ``_tokens``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

LONG_VERSION = "%YAML 1." + "0" * 5000 + "2"
"""A ``%YAML`` directive whose minor version Python refuses to convert (over 4,300 digits)."""


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("comment", ["# ?", "# x"])
@pytest.mark.parametrize("escape", ["\\U00110000", "\\UFFFFFFFF"])
def test_an_escape_past_a_parser_error_leaves_the_error_where_the_parser_stopped(
    comment: str, escape: str
) -> None:
    error = _error(f'{comment}\na: 1\n- "{escape}"\n')
    assert "expected <block end>, but found '-'" in error.message, error.message
    assert (error.line, error.column) == (3, 1)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("comment", ["# ?", "# x"])
def test_a_long_yaml_version_past_a_parser_error_leaves_the_error_where_the_parser_stopped(
    comment: str,
) -> None:
    error = _error(f"{comment}\n[a\n...\n{LONG_VERSION}\n---\nb: 1\n")
    assert "expected ',' or ']'" in error.message, error.message
    assert (error.line, error.column) == (3, 1)
    assert len(str(error)) < 400


@pytest.mark.usefixtures("parser")
def test_a_long_yaml_version_before_any_error_is_still_refused_at_its_tenth_digit() -> None:
    error = _error(f"# ?\n{LONG_VERSION}\n---\nb: 1\n")
    assert error.message.startswith("a %YAML directive's version number of more than nine digits")
    assert (error.line, error.column) == (2, 18)
