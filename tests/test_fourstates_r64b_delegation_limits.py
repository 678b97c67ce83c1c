"""``Gate.delegate`` refused a delegation the policy's ``delegation`` rules do not allow saying
what was wrong ("the policy does not let lead hand on tool:vault", "may live 60s at most, not
3000s") and not what to do (review R64): each refusal now ends with the delegation that fits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

ROOT, LEAD = SigningKey(bytes([91]) * 32), SigningKey(bytes([92]) * 32)
POLICY = f"""
version: 1
trust_anchors: {{root: {{did: "{ROOT.did}"}}}}
principals:
  lead: {{kind: agent, did: "{LEAD.did}", roles: [payer]}}
  clerk: {{kind: agent, did: "{SigningKey(bytes([93]) * 32).did}", roles: [clerk]}}
tools:
  pay: {{args: {{}}}}
  search: {{args: {{}}}}
  vault: {{args: {{}}}}
roles:
  payer:
    capabilities: [{{resource: "tool:pay"}}, {{resource: "tool:search"}}, {{resource: "tool:vault"}}]
    budget: {{limit: 1000, unit: calls}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      budget: {{limit: 10, unit: calls}}
      capabilities: [{{resource: "tool:pay"}}, {{resource: "tool:search"}}]
  clerk:
    capabilities: [{{resource: "tool:search"}}]
    ttl_s: 3600
"""


@pytest.fixture
def lead(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    gate = Gate(parse_policy(POLICY), SQLiteStore(tmp_path / "a.db"))
    try:
        yield gate, gate.issue(ROOT, name="lead", key=LEAD, role="payer")
    finally:
        gate.close()


def _refused(lead: tuple[Gate, AgentIdentity], caps: list[str], seconds: int, budget: int) -> Finding:
    gate, identity = lead
    with pytest.raises(AuthorityError) as refused:
        gate.delegate(
            identity,
            name="sub",
            key=SigningKey.generate(),
            capabilities=caps,
            ttl=timedelta(seconds=seconds),
            budget=budget,
        )
    assert refused.value.finding is not None
    assert refused.value.finding.message in str(refused.value)
    return refused.value.finding


def test_handing_on_a_capability_the_policy_keeps_names_what_may_be_handed_on(
    lead: tuple[Gate, AgentIdentity],
) -> None:
    """Review R64: "the policy does not let lead hand on tool:vault" named no fix."""
    finding = _refused(lead, ["tool:vault"], 30, 5)
    assert finding.code == "delegation_wider_than_policy"
    assert "delegate only what the policy lets lead hand on: tool:pay, tool:search" in finding.message


def test_a_delegation_that_lives_too_long_names_the_longest_ttl(lead: tuple[Gate, AgentIdentity]) -> None:
    """Review R64: "may live 60s at most, not 3000s" named no fix."""
    finding = _refused(lead, ["tool:pay"], 3000, 5)
    assert finding.code == "delegation_ttl_above_policy"
    assert "delegate it with a ttl of at most 60s" in finding.message


def test_a_delegation_with_too_large_a_budget_names_the_largest(lead: tuple[Gate, AgentIdentity]) -> None:
    """Review R64: "may carry a budget of 10 at most, not 500" named no fix (nor the unit)."""
    finding = _refused(lead, ["tool:pay"], 30, 500)
    assert finding.code == "delegation_budget_above_policy"
    assert "delegate it with a budget of at most 10 calls" in finding.message


def test_a_role_that_delegates_nothing_says_what_to_do(tmp_path: Path) -> None:
    """Review R64: "the roles of clerk may not delegate at all" named no fix."""
    gate = Gate(parse_policy(POLICY), SQLiteStore(tmp_path / "a.db"))
    try:
        clerk = gate.issue(ROOT, name="clerk", key=SigningKey(bytes([93]) * 32), role="clerk")
        with pytest.raises(AuthorityError) as refused:
            gate.delegate(
                clerk,
                name="sub",
                key=SigningKey.generate(),
                capabilities=["tool:search"],
                ttl=timedelta(seconds=30),
            )
        finding = refused.value.finding
        assert finding is not None and finding.code == "delegation_not_in_policy"
        assert "give one of its roles a delegation section" in finding.message
    finally:
        gate.close()
