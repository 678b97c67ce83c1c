"""A policy file holding only a tagged or anchored null is called null (review R91).

docs/policy-reference.md: a file holding only null is refused, "which the error calls null, at
its line and column". ``!!null``, ``&a`` (an anchor on nothing) and ``--- !!null`` are null
documents, but the error said "the policy file is empty" at 1:1, as for a file with no value at
all (for ``--- !!null`` the null is at 1:5). They are now called null, quoted, where written."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def refusal(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


@pytest.mark.parametrize(
    ("text", "written", "column"),
    [
        ("~\n", "~", 1),
        ("!!null\n", "!!null", 1),
        ("&a\n", "&a", 1),
        ("&a !!null\n", "&a !!null", 1),
        ("--- !!null\n", "!!null", 5),
        ("--- &a\n...\n", "&a", 5),
    ],
)
def test_a_null_document_is_called_null_where_written(text: str, written: str, column: int) -> None:
    error = refusal(text)
    assert error.message == f"the policy is null ({written!r}), not a mapping"
    assert (error.line, error.column) == (1, column)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "--- # a comment\n"])
def test_a_document_of_no_value_is_called_empty(text: str) -> None:
    error = refusal(text)
    assert error.message == "the policy file is empty"
    assert (error.line, error.column) == (1, 1)


def test_a_long_anchor_is_quoted_shortened() -> None:
    """The null is quoted as written, anchor included, and a long one shortened."""
    error = refusal("&" + "a" * 10_000 + "\n")
    assert error.message.startswith("the policy is null ('&aaa")
    assert "(10001 characters)" in error.message
    assert len(error.message) < 400
