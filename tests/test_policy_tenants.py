"""A tenant's name in a policy (a key of ``tenants``, a principal's ``tenant``, a quota's
``tenant``) is a policy name (``schema.Name``: 1 to 100 ASCII letters, digits, ``_``, ``.``,
``-``, starting with a letter or digit), refused at its file, line and column otherwise. It
refuses all that ``Gate.issue`` refuses in a tenant (``_check_name``: too long, a control, bidi
or invisible character), so the tenant a metric label, a fairness key and ``agentgate tasks``
show is one line of visible text whichever way it came in."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy

DID = SigningKey(b"\x01" * 32).did

_NOT_NAMES = [
    pytest.param("x" * 101, id="too-long"),
    pytest.param("acme\nteam", id="line-break"),
    pytest.param("acme\u202eemca", id="bidi-override"),
    pytest.param("acme\u200b", id="invisible"),
    pytest.param("acme\x1b[31m", id="escape-sequence"),
    pytest.param("acme team", id="space"),
    pytest.param("", id="empty"),
]


def _policy(tenant: str, where: str) -> str:
    quoted = repr(tenant).replace("'", '"')  # a YAML double-quoted scalar: escapes as Python's
    key = quoted if where == "tenants" else "acme"
    principal = quoted if where == "principal" else "acme"
    quota = quoted if where == "quota" else "acme"
    return (
        "version: 1\n"
        f"tenants:\n  {key}: {{}}\n"
        f"principals:\n  bob:\n    kind: human\n    did: {DID}\n    tenant: {principal}\n"
        f"quotas:\n  q:\n    tenant: {quota}\n    resources: ['tool:*']\n    limit: 10\n    window_s: 60\n    unit: calls\n"
    )


@pytest.mark.parametrize("where", ["tenants", "principal", "quota"])
@pytest.mark.parametrize("tenant", _NOT_NAMES)
def test_a_tenant_that_is_no_name_is_refused_at_its_line(tenant: str, where: str) -> None:
    """Review R56: pins that a policy tenant takes nothing Gate.issue's tenant refuses (no fix needed: schema.Name)."""
    line = {"tenants": 3, "principal": 8, "quota": 11}[where]
    with pytest.raises(PolicyError) as refused:
        parse_policy(_policy(tenant, where), source="p.yaml")
    assert refused.value.line == line and refused.value.column is not None
    assert "not a valid name" in refused.value.message


def test_a_tenant_of_a_hundred_name_characters_loads() -> None:
    tenant = "a" + "-._9" * 24 + "Z" * 3
    assert len(tenant) == 100
    for where in ["tenants", "principal", "quota"]:
        text = _policy(tenant, where).replace("acme", tenant)
        assert parse_policy(text, source="p.yaml").document.principals["bob"].tenant == tenant
