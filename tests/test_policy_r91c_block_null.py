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
import yaml

from agentgate import _yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("PyYAML is installed without libyaml")
        monkeypatch.setattr(_yaml, "_Loader", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(_yaml, "_Loader", yaml.SafeLoader)


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
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert refused.value.message == f"the policy is null ({written!r}), not a mapping"
    assert (refused.value.line, refused.value.column) == at
