"""Review R84 (regression): a tag PyYAML's own scanner reads as a tag handle and refuses at a ','
or before one (``[!,a!]``, ``[!a,b!c]``, ``[!?,x!]``) was refused in two ways: with libyaml as a
tag cut short at the ',' (libyaml reads ``[!,a!]`` as ``['', 'a!']``), with PyYAML's own parser
in its words ("while scanning a tag ... expected '!'"). Both now refuse it as the tag the parsers
disagree on, at the same line and column (agentgate/_yaml.py, ``_misread_tag``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

HANDLE_REFUSED_AT_A_COMMA = [
    ("a: [!,b!]\n", (1, 5)),  # libyaml: ['', 'b!']; PyYAML: the handle '!,b!' refused at the ','
    ("- [a, !,b!]\n", (1, 7)),
    ("a: [!c,b!d]\n", (1, 5)),
    ("a: {!,x!: 1}\n", (1, 5)),
    ("a: [!?,x!]\n", (1, 5)),  # PyYAML refuses the '?', before the ',' where libyaml ends the tag
    ("a: [!c?d!,e]\n", (1, 5)),
    ("a: [!c?d[!e]\n", (1, 5)),  # libyaml ends the tag at the '[' and refuses it
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), HANDLE_REFUSED_AT_A_COMMA)
def test_a_tag_handle_refused_at_or_before_a_comma_is_refused_alike(text: str, at: tuple[int, int]) -> None:
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert error.message.startswith("a tag with ',', '[' or ']' in it or right after it"), error.message
    assert error.expected == "a space after a tag"


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["a: [!%zz,b]\n", "a: [!c{,b]\n"])
def test_a_tag_both_parsers_end_before_a_comma_is_refused_in_the_parsers_words(text: str) -> None:
    """A tag both refuse before it reaches a ',' (an escape that is not one, a '{') is no
    disagreement: the message names what the parser found."""
    error = _error(text)
    assert error.message.startswith("malformed YAML: while scanning a tag"), error.message
