"""Review R92: the cap of MAX_RULES_ON_ONE_RESOURCE rules a role holds on a pattern counted only
the patterns its own rules name. A rule-less ``hub`` inheriting many roles' ``tool:*`` rules held
thousands, each read by a decision of its holder and compared by ``shadowed_rule`` with the rule
of every role inheriting the hub (25-35 s of lint for a 300 KB policy). Work is counted, not timed."""

from __future__ import annotations

import pytest
from _call_counts import calls_of

import agentgate.policy._index as index_module
import agentgate.policy._lint._constraints as constraints
from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.policy._lint._constraints import ShadowedRule
from agentgate.policy._load import MAX_RULES_ON_ONE_RESOURCE as MOST


def _hub(wild: list[int], heirs: int, *, heir_pattern: str = "tool:x") -> str:
    """Base roles ``b<i>`` holding ``wild[i]`` different rules on ``tool:*``, a rule-less ``hub``
    inheriting them all, ``heirs`` roles inheriting the hub with one rule each, and a principal
    ``q`` holding the hub."""
    lines = ["version: 1", "principals:", "  q: {kind: human, roles: [hub]}", "tools:"]
    lines += ["  x: {args: {n: {type: integer}}}", "roles:"]
    bound = 0
    for b, n in enumerate(wild):
        lines += [f"  b{b}:", "    ttl_s: 60", "    capabilities:"]
        for _ in range(n):
            lines.append(f"      - {{resource: 'tool:*', constraints: {{n: {{le: {bound}}}}}}}")
            bound += 1
    lines += ["  hub:", "    ttl_s: 60", f"    inherits: [{', '.join(f'b{b}' for b in range(len(wild)))}]"]
    for d in range(heirs):
        lines.append(
            f"  d{d}: {{ttl_s: 60, inherits: [hub], capabilities: [{{resource: '{heir_pattern}'}}]}}"
        )
    return "\n".join(lines) + "\n"


def _refusal(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    return caught.value


def test_a_rule_less_role_inheriting_more_wildcard_rules_than_the_cap_is_refused_at_its_inherits() -> None:
    text = _hub([MOST, MOST, 1], 3)
    error = _refusal(text)
    hub_inherits = text.splitlines().index("  hub:") + 3
    assert error.line == hub_inherits
    assert f"role hub holds {2 * MOST + 1} rules on tool:*, inherited ones" in error.message
    assert f"at most {MOST} rules" in str(error)


def test_a_diamond_counts_a_rule_once() -> None:
    """A role inheriting one base through two parents holds its rules once."""
    rule = "      - {resource: 'tool:*', constraints: {n: {le: %d}}}"
    lines = ["version: 1", "tools:", "  x: {args: {n: {type: integer}}}", "roles:"]
    lines += ["  base:", "    ttl_s: 60", "    capabilities:", *(rule % i for i in range(MOST))]
    lines += ["  a: {ttl_s: 60, inherits: [base]}", "  b: {ttl_s: 60, inherits: [base]}"]
    lines += ["  c: {ttl_s: 60, inherits: [a, b]}"]
    parse_policy("\n".join(lines) + "\n", source="p.yaml")


@pytest.mark.parametrize(("bases", "heirs"), [(2, 50), (10, 250), (39, 300)])
def test_shadowed_rule_and_a_decision_read_at_most_the_cap_per_rule(
    bases: int, heirs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's shape, growing: refused at load, and at the cap loaded with each heir's
    rule compared with at most MOST others and a decision of the hub's holder reading at most MOST."""
    with pytest.raises(PolicyError, match="role hub holds"):
        parse_policy(_hub([MOST] * bases, heirs), source="p.yaml")
    share, rest = divmod(MOST - 1, bases)
    policy = parse_policy(_hub([share + (b < rest) for b in range(bases)], heirs), source="p.yaml")
    compared = calls_of(monkeypatch, constraints, "attenuates")
    list(ShadowedRule().check(policy))
    assert compared[0] <= 2 * MOST * heirs  # at most two comparisons with each rule it meets
    read = calls_of(monkeypatch, index_module, "_passes")
    decision = PolicyIndex(policy).evaluate("q", Call.tool("x", {"n": 10**12}))
    assert decision.outcome.value == "deny"
    assert read[0] <= MOST
