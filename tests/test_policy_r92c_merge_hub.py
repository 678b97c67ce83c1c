"""Review R92's second regression review of 2805d71f: at a role inheriting several roles the
patterns of every inherited role but the largest were counted, so a common hub inheriting many
roles, inherited with each tenant's own role, was counted again at each tenant (~7x the load CPU
of 17954a42 for a 419 KB policy). The parent whose closure holds the most patterns was checked
first, so only the patterns of the roles outside its closure are counted now. Work is counted,
not timed."""

from __future__ import annotations

import pytest
from test_policy_r92b_combined_cap import _CountingCounter, _role, _rules, _text

import agentgate.policy._load as load_module
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.policy._load import MAX_RULES_ON_ONE_RESOURCE as MOST


def _hub(parts: int, each: int, tenants: int) -> list[str]:
    """The review's merge3 shape: ``hub`` inheriting ``parts`` roles of ``each`` rules, and per
    tenant a one-rule role ``s<i>`` and a role ``m<i>`` inheriting ``[hub, s<i>]``."""
    body = [
        line
        for b in range(parts)
        for line in _role(f"c{b}", [f"      - {{resource: 'tool:c{b}t{i}'}}" for i in range(each)])
    ]
    body += [f"  hub: {{inherits: [{', '.join(f'c{b}' for b in range(parts))}]}}"]
    body += [f"  s{i}: {{capabilities: [{{resource: 'tool:x'}}]}}" for i in range(tenants)]
    body += [f"  m{i}: {{inherits: [hub, s{i}]}}" for i in range(tenants)]
    return body


def test_a_hub_inherited_with_each_tenants_role_is_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parts, each, tenants = 10, 50, 300
    monkeypatch.setattr(load_module, "Counter", _CountingCounter)
    _CountingCounter.work = 0
    parse_policy(_text(_hub(parts, each, tenants)), source="p.yaml")
    # The hub's patterns once, each tenant's own few: at 2805d71f (parts - 1) * each per tenant.
    assert _CountingCounter.work <= 4 * (parts * each + tenants)


@pytest.mark.parametrize(("in_hub", "in_tenant"), [(40, 25), (MOST, 1), (1, MOST)])
def test_the_hubs_rules_on_a_tenants_pattern_still_count(in_hub: int, in_tenant: int) -> None:
    body = _hub(3, 5, 0)
    body += [*_role("c9", _rules("tool:x", in_hub)), *_role("s9", _rules("tool:x", in_tenant, 1000))]
    body[body.index("  hub: {inherits: [c0, c1, c2]}")] = "  hub: {inherits: [c0, c1, c2, c9]}"
    body += _role("m9", [], ["hub", "s9"])
    text = _text(body)
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    assert f"role m9 holds {in_hub + in_tenant} rules on tool:x, inherited ones" in caught.value.message
    assert caught.value.line == text.splitlines().index("    inherits: [hub, s9]") + 1
