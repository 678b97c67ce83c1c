"""Both parsers name the node-count error of a long file with too many nodes after a collection
nested past ``_COMPOSER_DEPTH`` (a regression review of R93, agentgate/_yaml.py).

A file over ``_COUNT_ABOVE`` (16 KiB) has its nodes counted before it is composed. R93 stopped
that count, for PyYAML's own parser, at the first collection nested deeper than
``_COMPOSER_DEPTH`` (200), where its composer stops: without libyaml such a file with too many
nodes further on was refused as nested too deep (at the deep collection), where libyaml, counting
on, refused it for its nodes (as both parsers did before R93). The count now goes on past that
collection, up to libyaml's own depth limit (``_LIBYAML_DEPTH``), without composing; an error of
PyYAML's there ends it, and the nesting error stands, as with libyaml.
"""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import _COUNT_ABOVE

DEEP = "[" * 201 + "1" + "]" * 201
"""A collection nested past ``_COMPOSER_DEPTH``, on line 1."""
MANY = "a: [" + ", ".join(["x"] * 9000) + "]\n"
"""9,000 nodes on line 2, the file past ``_COUNT_ABOVE``."""


@pytest.mark.usefixtures("parser")
def test_too_many_nodes_after_a_deep_collection_is_the_node_count_error() -> None:
    text = "b: " + DEEP + "\n" + MANY
    assert len(text) > _COUNT_ABOVE
    error = _error(text, 5000)
    assert "more than 5000 YAML nodes" in error.message, error.message
    assert (error.line, error.column) == (2, 14387), error


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    "text",
    [
        "b: " + DEEP[:-201] + ", x: y: z" + "]" * 201 + "\n" + MANY,
        "b: " + DEEP + "}\n" + MANY,  # the error where the deep collection has closed again
    ],
    ids=["inside", "after"],
)
def test_a_malformed_file_past_the_deep_collection_is_still_refused_as_nested_too_deep(text: str) -> None:
    # PyYAML's error after the deep collection ends the count; the nesting error comes first.
    error = _error(text, 50_000)
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == (1, 103), error


@pytest.mark.usefixtures("parser")
def test_a_file_past_libyaml_depth_is_refused_as_nested_too_deep_before_its_nodes() -> None:
    # libyaml refuses a collection nested deeper than 1,000 levels before it counts on.
    text = "b: " + "[" * 1001 + "1" + "]" * 1001 + "\n" + MANY
    error = _error(text, 5000)
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == (1, 103), error
