"""Review R92's regression review of fd7984d4: at each role inheriting several roles the rules of
every one of them were counted again, so a large common role inherited with each of many small
per-tenant ones was counted once per tenant (5.1 s instead of 1.25 s to load a 427 KB policy).
Each inherited role holds at most MAX_RULES_ON_ONE_RESOURCE on any one pattern, so only the
patterns of the roles outside the closure of the parent holding the most patterns are counted now
(``_most_inherited``; at 2805d71f, of all but the largest role). Work is counted, not timed."""

from __future__ import annotations

import pytest
from test_policy_r92b_combined_cap import _CountingCounter, _role, _rules, _text

import agentgate.policy._load as load_module
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.policy._load import MAX_RULES_ON_ONE_RESOURCE as MOST


def _tenants(common: int, tenants: int) -> str:
    """The review's perf_merge2 shape: ``base`` with rules on ``common`` tools, and per tenant a
    one-rule role ``s<i>`` and a role ``m<i>`` inheriting both."""
    body = ["  base:", "    capabilities:", *(f"      - {{resource: 'tool:t{i}'}}" for i in range(common))]
    body += [f"  s{i}: {{capabilities: [{{resource: 'tool:x'}}]}}" for i in range(tenants)]
    body += [f"  m{i}: {{inherits: [base, s{i}]}}" for i in range(tenants)]
    return _text(body)


def test_a_common_role_inherited_with_each_tenants_role_is_counted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    common, tenants = 2000, 400
    monkeypatch.setattr(load_module, "Counter", _CountingCounter)
    _CountingCounter.work = 0
    parse_policy(_tenants(common, tenants), source="p.yaml")
    assert _CountingCounter.work <= 4 * (common + tenants)  # at fd7984d4: common * tenants


@pytest.mark.parametrize(("large", "small"), [(40, 25), (MOST, 1), (1, MOST)])
def test_rules_the_largest_inherited_role_holds_on_a_shared_pattern_still_count(
    large: int, small: int
) -> None:
    text = _text(
        [
            *_role(
                "big", [*_rules("tool:x", large), *(f"      - {{resource: 'tool:t{i}'}}" for i in range(100))]
            ),
            *_role("small", _rules("tool:x", small, 1000)),
            *_role("r", [], ["big", "small"]),
        ]
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    assert f"role r holds {large + small} rules on tool:x, inherited ones" in caught.value.message
    assert caught.value.line == text.splitlines().index("    inherits: [big, small]") + 1
