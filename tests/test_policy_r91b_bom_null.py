"""A file holding only null after a byte order mark is quoted as written (review R91, second reading).

``load_yaml`` drops a leading U+FEFF; ``null_written`` composed the text with it and sliced the
text by the node's marks, which libyaml does not count the mark in (PyYAML's own parser does).
Where libyaml was installed, ``\\ufeff~`` was quoted as ``'\\ufeff'`` and ``\\ufeff!!null`` as
``'\\ufeff!!nul'``: the message depended on how PyYAML was installed. Both parsers now quote the
null itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentgate import _yaml
from agentgate.errors import PolicyError
from agentgate.policy import load_policy, parse_policy

NULLS = ["~", "null", "!!null", "&anchor", "&a !!null"]


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("PyYAML is installed without libyaml")
        monkeypatch.setattr(_yaml, "_Loader", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(_yaml, "_Loader", yaml.SafeLoader)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("written", NULLS)
def test_a_null_after_a_byte_order_mark_is_quoted_as_written(written: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(f"\ufeff{written}\n", source="p.yaml")
    assert refused.value.message == f"the policy is null ({written!r}), not a mapping"
    assert (refused.value.line, refused.value.column) == (1, 1)


@pytest.mark.usefixtures("parser")
def test_a_file_of_null_after_a_byte_order_mark_is_quoted_as_written(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\xef\xbb\xbf# a comment\n~\n")
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    assert refused.value.message == "the policy is null ('~'), not a mapping"
    assert (refused.value.line, refused.value.column) == (2, 1)
