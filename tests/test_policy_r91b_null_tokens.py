"""A file holding only null is quoted by its anchor, tag and value, not by the text between them
(review R91, second reading).

The null was quoted as its node's span of the text, so the comments and line breaks between its
anchor, tag and value were quoted with it: ``--- &a # c\\n  ~`` was called null
(``'&a # c\\n  ~'``), where ``~`` alone had been quoted before, and ``&a # why ...\\n!!null``
quoted the author's comment, a bidi override included, in a message about the value. The
anchor, tag and value are now quoted as written, joined by a space."""

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
        ("--- &a # c\n  ~\n", "&a ~", (1, 5)),
        ("&a # why \u202e not\n!!null\n", "&a !!null", (1, 1)),
        ("&a\n  !!null\n    ''\n", "&a !!null ''", (1, 1)),
        ("!!null   &a  # c\n  null  # d\n", "!!null &a null", (1, 1)),
        ("# before\n&a   # after\n\n# more\n", "&a", (2, 1)),
    ],
)
def test_a_null_is_quoted_by_its_anchor_tag_and_value(text: str, written: str, at: tuple[int, int]) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert refused.value.message == f"the policy is null ({written!r}), not a mapping"
    assert (refused.value.line, refused.value.column) == at
