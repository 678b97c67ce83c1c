"""Plain and tagged scalars of the policy's YAML reader (agentgate/_yaml.py): numbers read as
YAML 1.2 reads them, and a tag outside the core schema refused at its line."""

from __future__ import annotations

import pytest


def test_an_unquoted_exponent_without_a_dot_is_a_number_as_in_yaml_1_2() -> None:
    """R13: ``timeout_s: 1e3`` (a float in YAML 1.2, which docs/policy-reference.md says plain
    scalars follow) was read as text and refused with the hint "write the value unquoted"."""
    from agentgate._yaml import load_yaml

    data, _ = load_yaml("a: 1e3\nb: -2E-3\nc: '1e3'\nd: 1e3x\n", source="t.yaml")
    assert data == {"a": 1000.0, "b": -0.002, "c": "1e3", "d": "1e3x"}


@pytest.mark.parametrize("tagged", ["!!timestamp 2026-01-31", "&d !!timestamp 2026-01-31"])
def test_a_timestamp_tag_is_refused_as_every_tag_outside_the_core_schema(tagged: str) -> None:
    """R47 (policy helper): an explicit, unquoted ``!!timestamp`` was read as text, where
    docs/policy-reference.md refuses every tag outside the core schema; a plain date stays text."""
    from agentgate._yaml import load_yaml
    from agentgate.errors import PolicyError

    assert load_yaml("a: 2026-01-31\n", source="t.yaml")[0] == {"a": "2026-01-31"}
    with pytest.raises(PolicyError, match=r"t.yaml:1:4: tag 'tag:yaml.org,2002:timestamp' is not allowed"):
        load_yaml(f"a: {tagged}\n", source="t.yaml")
