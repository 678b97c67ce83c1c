"""A file holding only a null written as a block scalar is quoted by the scalar's header and value,
not by its token's text (review R91, third reading).

Since review R91's second reading a null is quoted by its anchor, tag and value tokens, so that a
comment between them is not quoted in a message about the value. A block scalar's token (``|``,
``>``) runs, in libyaml and in PyYAML alike, from its indicator through its header's comment and
every line break after its content: ``!!null | # why <bidi override> reason`` quoted the
author's comment, override included, and ``!!null |`` followed by 5,000 blank lines filled the
quote's 100 characters with line breaks. The scalar is now quoted by its header (the indicator,
its chomping and indentation) and its value where it has one."""

from __future__ import annotations

import pytest
from _null_policies import assert_null_quoted
from _null_policies import parser as parser  # the fixture


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "written", "at"),
    [
        ("!!null | # why \u202e reason\n", "!!null |", (1, 1)),
        ("!!null |\n" + "\n" * 5000, "!!null |", (1, 1)),
        ("!!null >- # c\n\n\n", "!!null >-", (1, 1)),
        ("&a !!null |-  # c\n  \n", "&a !!null |-", (1, 1)),
        ("--- !!null |+\r\n", "!!null |+", (1, 5)),
        ("!!null |-\n  null\n\n# after\n", "!!null |- null", (1, 1)),
        ("\ufeff!!null >-1 # c\n NULL\n", "!!null >-1 NULL", (1, 1)),
    ],
)
def test_a_block_null_is_quoted_by_its_header_and_value(text: str, written: str, at: tuple[int, int]) -> None:
    assert_null_quoted(text, written, at)
