"""Review R90: at every node's start the loader looks for a tag after the node's anchor
(agentgate/_yaml.py ``_TAGGED``, and ``_NON_SPECIFIC`` and ``_VERBATIM_NON_SPECIFIC`` built on
it). The anchor was ``&\\S+``, which ran on past a ',' to the next blank and, the match failing,
back again: each anchored empty value of ``[&a0,&a1,...]`` cost the rest of the line, so a 55 KB
policy took 20 s to load (a 300 KB one, under every limit, minutes). It also took the tag of the
value after an anchored empty one for its own: ``[&a, ! 5]`` loaded as ``['', '5']``. The anchor
is now its name as both parsers read one (letters, digits, '-', '_'), so the tag is looked for
only after it, its blanks and its comments."""

from __future__ import annotations

import re

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import _NON_SPECIFIC, _TAGGED, _VERBATIM_NON_SPECIFIC, load_yaml

TAGS = [
    pytest.param(_TAGGED, "!!str x", id="tagged"),
    pytest.param(_NON_SPECIFIC, "! x", id="non-specific"),
    pytest.param(_VERBATIM_NON_SPECIFIC, "!<!> x", id="verbatim-non-specific"),
]
"""Each pattern matched at a node's start, and a tag it finds."""
AFTER_ANCHOR = [",", ":", "]", "}", "?"]
"""What may follow an anchor's name, other than a blank, in a file both parsers read."""


@pytest.mark.parametrize(("pattern", "tag"), TAGS)
def test_a_tag_is_found_after_an_anchor_its_blanks_and_its_comments(
    pattern: re.Pattern[str], tag: str
) -> None:
    for start in ("", "&a ", "&a-b_9  ", "&a # why\n  ", "&a\n  # why\n\n  # more\n  "):
        assert pattern.match(start + tag) is not None, start + tag


@pytest.mark.parametrize(("pattern", "tag"), TAGS)
@pytest.mark.parametrize("after", AFTER_ANCHOR)
def test_no_tag_is_looked_for_past_the_anchors_name(pattern: re.Pattern[str], tag: str, after: str) -> None:
    # ``[&a, ! x]``: the '!' is the next value's, not the anchored empty value's.
    assert pattern.match(f"&a{after} {tag}") is None
    assert pattern.match(f"&a{after}b {tag}") is None


@pytest.mark.parametrize(("pattern", "tag"), TAGS)
def test_no_node_start_is_read_on_to_the_end_of_a_line_of_anchors(pattern: re.Pattern[str], tag: str) -> None:
    # The reported file's shape, with a tag at the end of its line: until R90 the match at each
    # of the 2,000 starts ran on to the tag at the end of the line, and found it.
    line = ",".join(f"&a{i}" for i in range(2_000)) + ", " + tag
    starts = [i for i, c in enumerate(line) if c == "&"]
    assert [pattern.match(line, at) for at in starts] == [None] * len(starts)
    assert pattern.match(line, line.index("!")) is not None


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("x: [&a, ! 5]\n", [None, "5"]),
        ("x: [&a,! 5]\n", [None, "5"]),
        ("x: [&a, ! 1e3, &b]\n", [None, "1e3", None]),
        ("x: [&a,\n  ! 7]\n", [None, "7"]),
        ("x: [&a, !!str 5]\n", [None, "5"]),
        ("x: [&a, 0o17]\n", [None, 15]),
        # What the anchor's blanks and comments lead to stays the anchored value's tag.
        ("x: [&a ! 5]\n", ["5"]),
        ("x: &a ! 5\n", "5"),
        ("x: &a-b_c !!str 1e3\n", "1e3"),
        ("x: &a # why\n  ! 5\n", "5"),
        ("x:\n  - &a\n  - ! 5\n", [None, "5"]),
    ],
)
def test_an_anchored_empty_value_is_null_whatever_tag_the_next_value_has(text: str, value: object) -> None:
    assert load_yaml(text, source="p.yaml")[0] == {"x": value}


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["x: {&a: ! 5}\n", "x: {&a : ! 5}\n", "x: [&a:b, ! 5]\n"])
def test_an_anchored_empty_key_is_null_whatever_tag_its_value_has(text: str) -> None:
    # Until R90 ``{&a: ! 5}`` loaded as ``{'': '5'}``, where ``{&a : ! 5}`` was refused.
    error = _error(text)
    assert (error.line, error.column) == (1, 5)
    assert error.message.startswith("mapping keys must be plain strings"), error.message


def test_a_line_of_anchored_empty_values_loads_as_nulls() -> None:
    count = 4_000
    text = "x: [" + ",".join(f"&a{i}" for i in range(count)) + "]\n"
    assert load_yaml(text, source="p.yaml")[0] == {"x": [None] * count}
