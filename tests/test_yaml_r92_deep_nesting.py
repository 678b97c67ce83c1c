"""Review R92: a file nested deeper than PyYAML's own composer can recurse (about 500 levels)
was refused with no line or column: "nested more than 100 levels deep" and nothing else, with
libyaml for a malformed file (the re-read that locates libyaml's error recursed), and without
libyaml for any such file. PyYAML's own composer now counts the depth and stops at 200 levels
(``_COMPOSER_DEPTH``), refusing the file at the start of the first collection past ``MAX_DEPTH``,
where the builder refuses one libyaml composed; a file nested 101 to 200 deep is read whole, so
it gets the error libyaml's path names first (agentgate/_yaml.py, ``_limit_depth``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

DEPTHS = [150, 600, 900]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("depth", [250, 600, 900])
def test_a_malformed_file_nested_deeper_than_the_composer_goes_is_refused_where_it_nests_too_deep(
    depth: int,
) -> None:
    error = _error("version: 1\nx: " + "[" * depth + "a, b: c: d" + "]" * depth + "\n")
    assert (error.line, error.column) == (2, 103), error
    assert "nested more than 100 levels deep" in error.message, error.message


@pytest.mark.usefixtures("parser")
def test_a_malformed_file_nested_past_the_limit_but_not_past_the_composers_names_its_error() -> None:
    error = _error("version: 1\nx: " + "[" * 150 + "a, b: c: d" + "]" * 150 + "\n")
    assert error.message.startswith("malformed YAML"), error.message
    assert (error.line, error.column) == (2, 161), error


NESTED_150 = "[" * 150 + "]" * 150
EARLIER_OR_OTHER = [
    pytest.param("<<: {}\nx: " + NESTED_150 + "\n", (1, 1), "merge keys", id="merge-key-then-deep"),
    pytest.param("x: 1\nx: 2\ny: " + NESTED_150 + "\n", (2, 1), "duplicate key", id="duplicate-then-deep"),
    pytest.param("x: " + NESTED_150 + "\ny:\t1\n", (2, 3), "tab", id="deep-then-tab"),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "where", "said"), EARLIER_OR_OTHER)
def test_a_file_nested_past_the_limit_gets_the_error_libyaml_gets(
    text: str, where: tuple[int, int], said: str
) -> None:
    """A regression review of R92: PyYAML's own composer stopped at 101 levels, before the checks
    libyaml's tree goes through first, so the two parsers named different errors."""
    error = _error(text)
    assert (error.line, error.column) == where, error
    assert said in error.message, error.message


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_well_formed_file_nested_deep_is_refused_where_it_nests_too_deep(depth: int) -> None:
    error = _error("version: 1\nx: " + "[" * depth + "]" * depth + "\n")
    assert (error.line, error.column) == (2, 103), error


@pytest.mark.usefixtures("parser")
def test_a_block_file_nested_deep_is_refused_where_it_nests_too_deep() -> None:
    text = "".join(" " * i + "-\n" for i in range(600))
    error = _error(text)
    assert (error.line, error.column) == (101, 101), error


@pytest.mark.usefixtures("parser")
def test_an_error_before_the_nesting_limit_is_still_named() -> None:
    error = _error("version: 1\nx: " + "[" * 50 + "a, b: c: d" + "]" * 50 + "\n")
    assert (error.line, error.column) == (2, 61), error
    assert error.message.startswith("malformed YAML"), error.message
