"""Where errors point in a YAML file that holds U+0085, U+2028 or U+2029: libyaml and PyYAML count
each as a line break, editors and ``grep -n`` do not; every message names the line and column an
editor shows (agentgate/_yaml.py, ``_Lines``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

pytestmark = pytest.mark.usefixtures("parser")
"""Every test runs on both parsers (libyaml and the pure-Python one)."""

SEPARATORS = [
    pytest.param("\u2028", id="line-separator"),
    pytest.param("\u2029", id="paragraph-separator"),
    pytest.param("\x85", id="next-line"),
]


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_separator_in_a_comment_does_not_shift_the_lines_below(separator: str) -> None:
    """Review R57, an error below a U+2028 in a comment was located one line too low.

    Both parsers count U+0085, U+2028 and U+2029 as line breaks, so every line after one was
    numbered one higher than an editor or ``grep -n`` shows it: the message pointed at the
    wrong line. Both lines of a duplicate key are now the editor's.
    """
    error = _error(f"# a note{separator}\na: 1\nb: 2\na: 3\n")
    assert (error.line, error.column) == (4, 1), error
    assert "first at line 2" in error.message, error.message


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_malformed_file_is_located_at_the_editors_line(separator: str) -> None:
    """Review R57, a parser's error below a separator (and the line of its context) was one line low."""
    error = _error(f"# a note{separator}\na: 1\nb: [1, 2\n")
    assert (error.line, error.column) == (3, 4), error
    assert "at line 3, column 4" in error.message, error.message


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_schema_error_is_located_at_the_editors_line(separator: str) -> None:
    """Review R57, a policy's schema error below a separator named the line after the right one."""
    with pytest.raises(PolicyError) as info:
        parse_policy(f"version: 1\n# a note{separator}\nroles:\n  a:\n    ttl_s: soon\n", source="p.yaml")
    assert (info.value.line, info.value.column) == (5, 12), info.value


@pytest.mark.parametrize("separator", SEPARATORS)
def test_the_column_after_a_separator_counts_from_the_lines_start(separator: str) -> None:
    """Review R57, a column after a separator in a quoted string counted from the separator."""
    error = _error(f'c: {{a: "x{separator}y", a: 2}}\n')
    assert (error.line, error.column) == (1, 15), error
    error = _error(f'a: "x{separator}y"\nb: 1\nb: 2\n')
    assert (error.line, error.column) == (3, 1), error


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_character_refused_below_a_separator_is_located_at_the_editors_line(separator: str) -> None:
    """Review R57, an unacceptable character below a separator was located one line low."""
    error = _error(f"# a note{separator}\na: x\x07\n")
    assert (error.line, error.column) == (2, 5), error


def test_a_file_without_separators_keeps_the_parsers_lines() -> None:
    """Pins: \\n, \\r\\n and a lone \\r each end a line, for the parsers and for editors alike."""
    error = _error("a: 1\r\nb: 2\rc: 3\na: 4\n")
    assert (error.line, error.column) == (4, 1), error
