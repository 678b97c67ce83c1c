"""Review R90b: R90 made an anchored empty value before a value tagged ``!`` null in flow context
(``[&a, ! 5]``), but the tag search at a node's start (agentgate/_yaml.py ``_TAGGED``) reads on
past a line break after the anchor, since a tag on the next line may be the node's own. In a
block collection the next line may start the next entry instead: ``k: &a`` then ``! j: 1`` took
the key's tag for the empty value's, which loaded as ``''`` where both parsers read null. A tag
now counts only within the node as the parser marks it."""

from __future__ import annotations

import pytest
from test_yaml import parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("k: &a\n! 5: 1\n", {"k": None, "5": 1}),
        ("k: &a\n! true: 1\n", {"k": None, "true": 1}),
        ("x:\n  k: &a\n  ! j: 1\n", {"x": {"k": None, "j": 1}}),
        ("k: &a  # note\n! j: 1\n", {"k": None, "j": 1}),
        ("k: &a\n# note\n\n! j: 1\n", {"k": None, "j": 1}),
    ],
)
def test_an_anchored_empty_block_value_is_null_whatever_tag_the_next_key_has(
    text: str, value: object
) -> None:
    assert load_yaml(text, source="p.yaml")[0] == value


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("k: &a\n  ! 5\n", {"k": "5"}),
        ("k: &a # why\n  !!str 1e3\n", {"k": "1e3"}),
        ("k: &a\n\n  # why\n  ! 5: 1\n", {"k": {"5": 1}}),
        ("- &a\n  ! 5\n", ["5"]),
        ("&a\n! 5\n", "5"),
    ],
)
def test_a_tag_on_the_line_after_an_anchor_stays_the_nodes_where_the_parsers_read_it_so(
    text: str, value: object
) -> None:
    assert load_yaml(text, source="p.yaml")[0] == value
