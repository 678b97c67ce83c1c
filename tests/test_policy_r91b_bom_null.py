"""A file holding only null after a byte order mark is quoted as written (review R91, second reading).

``load_yaml`` drops a leading U+FEFF; ``null_written`` composed the text with it and sliced the
text by the node's marks, which libyaml does not count the mark in (PyYAML's own parser does).
Where libyaml was installed, ``\\ufeff~`` was quoted as ``'\\ufeff'`` and ``\\ufeff!!null`` as
``'\\ufeff!!nul'``: the message depended on how PyYAML was installed. Both parsers now quote the
null itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from _null_policies import assert_null_quoted
from _null_policies import parser as parser  # the fixture

from agentgate.errors import PolicyError
from agentgate.policy import load_policy

NULLS = ["~", "null", "!!null", "&anchor", "&a !!null"]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("written", NULLS)
def test_a_null_after_a_byte_order_mark_is_quoted_as_written(written: str) -> None:
    assert_null_quoted(f"\ufeff{written}\n", written, (1, 1))


@pytest.mark.usefixtures("parser")
def test_a_file_of_null_after_a_byte_order_mark_is_quoted_as_written(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\xef\xbb\xbf# a comment\n~\n")
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    assert refused.value.message == "the policy is null ('~'), not a mapping"
    assert (refused.value.line, refused.value.column) == (2, 1)
