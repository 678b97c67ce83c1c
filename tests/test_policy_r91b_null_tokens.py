"""A file holding only null is quoted by its anchor, tag and value, not by the text between them
(review R91, second reading).

The null was quoted as its node's span of the text, so the comments and line breaks between its
anchor, tag and value were quoted with it: ``--- &a # c\\n  ~`` was called null
(``'&a # c\\n  ~'``), where ``~`` alone had been quoted before, and ``&a # why ...\\n!!null``
quoted the author's comment, a bidi override included, in a message about the value. The
anchor, tag and value are now quoted as written, joined by a space."""

from __future__ import annotations

import pytest
from _null_policies import assert_null_quoted
from _null_policies import parser as parser  # the fixture


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "written", "at"),
    [
        ("--- &a # c\n  ~\n", "&a ~", (1, 5)),
        ("&a # why \u202e not\n!!null\n", "&a !!null", (1, 1)),
        ("&a\n  !!null\n    ''\n", "&a !!null ''", (1, 1)),
        ("!!null   &a  # c\n  null  # d\n", "!!null &a null", (1, 1)),
        ("# before\n&a   # after\n\n# more\n", "&a", (2, 1)),
    ],
)
def test_a_null_is_quoted_by_its_anchor_tag_and_value(text: str, written: str, at: tuple[int, int]) -> None:
    assert_null_quoted(text, written, at)
