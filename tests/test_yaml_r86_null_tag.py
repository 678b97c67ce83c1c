"""Review R86: a scalar tagged ``!!null`` loaded as null whatever its text: ``tenant: !!null acme``
gave the principal no tenant, so the tenant's quotas no longer counted its calls, where
``!!bool yes`` and ``!!int 10:30`` are refused. Now ``!!null`` holds only what YAML 1.2 reads as
null, and any other text is refused where it is written (agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["acme", "'acme'", '"acme"', "0", "yes", "nULL", "|\n  x"])
def test_a_null_tag_on_other_text_is_refused(text: str) -> None:
    error = _error(f"a: 1\nb: !!null {text}\n")
    assert error.message.startswith("not null: "), error.message
    assert (error.line, error.column) == (2, 4)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["", "null", "Null", "NULL", "~", "''", '"~"'])
def test_a_null_tag_on_null_is_null(text: str) -> None:
    assert load_yaml(f"a: !!null {text}\nb: 1\n", source="p.yaml")[0] == {"a": None, "b": 1}


def test_a_principals_tenant_tagged_null_is_refused_in_a_policy() -> None:
    policy = (
        "version: 1\ntenants: {acme: {}}\n"
        "principals:\n  bot: {kind: agent, tenant: !!null acme, roles: [r]}\n"
        "roles:\n  r: {kind: agent}\n"
    )
    with pytest.raises(PolicyError, match="not null: 'acme'") as info:
        parse_policy(policy, source="p.yaml")
    assert (info.value.line, info.value.column) == (4, 30)
