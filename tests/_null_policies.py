"""A policy file holding only null, read by each YAML parser agentgate may run on (review R91,
second and third readings): ``parser`` runs a test once with libyaml and once with PyYAML's own
parser, and ``assert_null_quoted`` checks the refusal quotes the null as written."""

from __future__ import annotations

import pytest
import yaml

from agentgate import _yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy read by libyaml (skipped where PyYAML is installed without it), then by PyYAML's
    own parser."""
    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("PyYAML is installed without libyaml")
        monkeypatch.setattr(_yaml, "_Loader", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(_yaml, "_Loader", _yaml._PureLoader)


def assert_null_quoted(text: str, written: str, at: tuple[int, int]) -> None:
    """``text`` is refused as a null policy quoted as ``written``, at ``(line, column)`` ``at``."""
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert refused.value.message == f"the policy is null ({written!r}), not a mapping"
    assert (refused.value.line, refused.value.column) == at
