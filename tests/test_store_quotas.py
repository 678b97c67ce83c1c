"""Quota counters (agentgate/store/quotas.py) as the Gate uses them: an amount is counted in the
decision's transaction or refused, with the refusal recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

QUOTA_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  a: {{kind: agent, did: "{agent}", roles: [r]}}
models:
  small:
    cost_per_mtok: {{input: 50000, output: 80000}}
roles:
  r:
    kind: agent
    capabilities: [{{resource: "model:small"}}]
    ttl_s: 600
quotas:
  q: {{principal: a, window_s: 60, limit: 1000000, unit: {unit}, resources: ["model:*"]}}
"""


@pytest.mark.parametrize("unit", ["tokens", "usd_micros"])
def test_an_amount_no_quota_column_can_hold_is_a_recorded_refusal(tmp_path: Path, unit: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = QUOTA_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, unit=unit)
    gate = Gate(parse_policy(text, source="q.yaml"), SQLiteStore(tmp_path / "s.db"))
    try:
        agent = gate.issue(keys["root"], name="a", key=keys["agent"], role="r")
        before = len(list(gate.audit.entries()))
        auth = gate.authorize(agent, Call.model("small"), tokens=(10**30, 0))  # OverflowError here
        assert not auth.allowed and auth.quota_exceeded is not None
        assert len(list(gate.audit.entries())) == before + 1
    finally:
        gate.close()
