"""Tabs, ``?`` inside flow collections, and errors at the end of a file: libyaml and PyYAML's own
parser read them differently (a tab between tokens or inside plain text is a space to one and
refused by the other; ``[a ?b]`` is the text ``a ?b`` to one and a key to the other; an unclosed
``{?`` was refused at 2:1 by one and 1:3 by the other). Each is now accepted by both or refused by
both with the same typed error at the same line and column (agentgate/_yaml.py, ``_disagreed``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml

pytestmark = pytest.mark.usefixtures("parser")
"""Every test runs on both parsers (libyaml and the pure-Python one)."""

TABS = [
    ("a:\tb\n", (1, 3)),
    ("a: b\t\n", (1, 5)),
    ("a: b\tc\n", (1, 5)),
    ("a\t: b\n", (1, 2)),
    ("- a\t\n", (1, 4)),
    ("a: [b,\tc]\n", (1, 7)),
    ("a: {b: c\t}\n", (1, 9)),
    ("a: 'b'\t\n", (1, 7)),
    ("a: 1\nb: x\t# why\n", (2, 5)),
    ("\ta: b\n", (1, 1)),
    ("{\t", (1, 2)),
    ("a: |\t\n  x\n", (1, 5)),
    ("a: |\n  \tx\n", (2, 3)),
    ("a: >\n\n  \tx\n", (3, 3)),
]


@pytest.mark.parametrize(("text", "at"), TABS)
def test_a_tab_outside_quoted_text_is_refused_where_it_is(text: str, at: tuple[int, int]) -> None:
    """Review R66: libyaml read ``a:\\tb`` as ``{a: b}`` and ``b\\tc`` as the text ``b<tab>c``;
    PyYAML's own parser refused both (``found character '\\t' that cannot start any token``). A
    file loaded or not depending on how PyYAML was built. Both refuse it now, at the tab."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert "a tab outside quoted text" in error.message, error.message


def test_a_tab_in_quoted_text_a_comment_or_a_block_scalar_is_text() -> None:
    """Review R66: where both parsers read a tab alike, it still loads."""
    text = (
        'a: "x\ty"\nb: \'x\ty\'\nc: d # a\tcomment\n#\tcomment\ne: |\n  x\ty\n  \tz\nf: "#\t"\ng: |2\n  \tx\n'
    )
    data, _ = load_yaml(text, source="p.yaml")
    assert data == {"a": "x\ty", "b": "x\ty", "c": "d", "e": "x\ty\n\tz\n", "f": "#\t", "g": "\tx\n"}


@pytest.mark.parametrize(("text", "at"), [("a: |#\n  x\n", (1, 5)), ("a: >-#\n  x\n", (1, 6))])
def test_a_comment_right_after_a_block_indicator_is_refused(text: str, at: tuple[int, int]) -> None:
    """Review R66: libyaml read ``|#`` as a block scalar and a comment, PyYAML's own parser
    refused it (``expected a comment or a line break``). Both refuse it now, at the ``#``."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert "right after a block scalar's indicator" in error.message, error.message


QUESTION_MARKS = [
    ("a: [b ?c]\n", (1, 7)),
    ("a: [x y? ]\n", (1, 8)),
    ("a: [b ?]\n", (1, 7)),
    ("a: {x?y: 1}\n", (1, 6)),
    ("a: [b,\n  c ?d]\n", (2, 5)),
]


@pytest.mark.parametrize(("text", "at"), QUESTION_MARKS)
def test_a_question_mark_within_plain_text_in_a_flow_collection_is_refused(
    text: str, at: tuple[int, int]
) -> None:
    """Review R66: libyaml read ``[b ?c]`` as the list of the text ``b ?c``; PyYAML's own parser
    ends plain text at a ``?`` inside ``[...]`` or ``{...}`` and reads a key there, then refuses
    the list. Both refuse it now, at the ``?``."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert "'?' within plain text" in error.message, error.message


def test_a_question_mark_both_parsers_read_alike_still_loads() -> None:
    """Review R66: a ``?`` in block plain text, in quoted text, or as a flow key loads as before."""
    text = "a: x ? y\nb: ['x?y', \"?\"]\nc: [? k]\nd: {? k: v}\ne: https://h/p?q=1\n"
    data, _ = load_yaml(text, source="p.yaml")
    assert data == {
        "a": "x ? y",
        "b": ["x?y", "?"],
        "c": [{"k": None}],
        "d": {"k": "v"},
        "e": "https://h/p?q=1",
    }


@pytest.mark.parametrize(("text", "at"), [("{?", (1, 1)), ("[?", (1, 1)), ("a: {?", (1, 4))])
def test_an_error_at_the_end_of_a_file_is_located_alike_by_either_parser(
    text: str, at: tuple[int, int]
) -> None:
    """Review R66: libyaml marks the end of a text without a final line break on the line after
    it (2:1), PyYAML at its end (1:3): an unclosed ``{?`` was refused at different places. A mark
    past the end is the end, on either parser; since review R81 an error at the end with a
    bracket still open is located at that bracket (tests/test_yaml.py), on either parser too."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
