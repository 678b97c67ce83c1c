"""A policy's `version` that is null or a boolean is quoted as the file wrote it, not as Python
names it: review R70's second reading of the version message (r70-user's fix said `None` no more
for a missing key, but still did for an empty one)."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.mark.parametrize(
    ("line", "written"),
    [
        ("version:", "null (the key has no value)"),
        ("version: ~", "null (the key has no value)"),
        ("version: null", "null (the key has no value)"),
        ("version: true", "true"),
        ("version: false", "false"),
    ],
)
def test_a_null_or_boolean_version_is_named_as_written(line: str, written: str) -> None:
    """Review R70: `version:` (no value, as a template leaves it) was refused as `unsupported or
    missing policy version None`, and `version: true` as `... version True`: Python's words, which
    the file's author never wrote (R70 had removed `None` for a file with no `version` key only).
    The message keeps its words (scripts match them) and names the value as YAML and JSON write it."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"{line}\nname: support\n", source="p.yaml")
    message = caught.value.message
    assert message == f"unsupported or missing policy version {written}"
    assert "None" not in str(caught.value) and "True" not in str(caught.value)
