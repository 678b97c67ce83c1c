"""What each grant of a chain was charged is in the ``outcome`` entry (its ``charges``).

When a call's actual cost exceeds its reservation, ``BudgetLedger.commit`` charges the overrun on
every grant of the chain, each as far as its budget goes. Until review R61 the outcome entry named
only the largest shortfall on the chain (``overran the UNIT budget by N``), so ``budget_delta - N``
was the charge of that one budget: an ancestor with more left was charged more, and the log did not
say how much. Now the entry records each grant's charge, and an auditor rebuilds every grant's
spend from the log alone (docs/audit-format.md, ``charges``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import InputError, TamperDetected
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: model:small
    budget: {{limit: 100, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: model:small
"""


def test_each_grant_of_the_chain_has_its_charge_in_the_outcome(tmp_path: Path) -> None:
    """Review R61: an overrun past a child's budget charges the parent more; the entry says each."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "helper")}
    text = POLICY.format(root=keys["root"].did, agent=keys["agent"].did)
    gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        helper = gate.delegate(
            agent,
            name="helper",
            key=keys["helper"],
            capabilities=["model:small"],
            ttl=timedelta(seconds=60),
            budget=80,
        )
        root, child = agent.chain.tip.id, helper.chain.tip.id
        first = gate.authorize(helper, Call.model("small"), tokens=(10, 20))
        gate.run(first, lambda: "x", spent=lambda _: (10, 20))  # 30: root 70 left, child 50
        second = gate.authorize(helper, Call.model("small"), tokens=(5, 5))
        gate.run(second, lambda: "x", spent=lambda _: (195, 5))  # 200: an overrun of 190
        gate.flush()
        outcome = list(gate.audit.entries())[-1]
        assert outcome.kind == "outcome" and outcome.budget_delta == 200
        assert outcome.charges == {root: {"usd_micros": 70}, child: {"usd_micros": 50}}
        assert (gate.ledger.spent(root), gate.ledger.spent(child)) == (100, 80)
        # The log alone: each grant's spend is the sum of its charges over the outcome entries.
        rebuilt: dict[str, int] = {}
        for entry in gate.audit.entries():
            for grant, by_unit in (entry.charges or {}).items():
                rebuilt[grant] = rebuilt.get(grant, 0) + by_unit["usd_micros"]
        assert rebuilt == {root: 100, child: 80}
        assert gate.verify().ok
    finally:
        gate.close()


def test_an_entry_without_charges_keeps_its_bytes() -> None:
    """Review R61: ``charges`` is written only when set, so entries written before it still verify."""
    old = (
        b'{"approver":null,"args":{},"args_digest":null,"budget_delta":5,"chain_hash":null,"index":3,'
        b'"kind":"outcome","policy_hash":null,"principal":"did:key:z","reasons":[],"ref":2,"resource":null,'
        b'"rule":null,"status":"ok","time":"2026-11-29T10:15:00.000000Z","v":1}'
    )
    entry = AuditEntry.from_bytes(old)
    assert entry.charges is None and entry.to_bytes() == old
    # A null ``charges`` is not the canonical form of an entry without charges: one byte string each.
    with_null = old.replace(b'"chain_hash":null,', b'"chain_hash":null,"charges":null,')
    with pytest.raises(TamperDetected, match="canonical"):
        AuditEntry.from_bytes(with_null)
    charged = AuditEntry.build(**{**entry.model_dump(), "charges": {"g": {"usd_micros": 5}}})
    assert AuditEntry.from_bytes(charged.to_bytes()) == charged
    assert b'"charges":{"g":{"usd_micros":5}}' in charged.to_bytes()


@pytest.mark.parametrize(
    "charges",
    [{"g": {"usd_micros": -1}}, {"g": {"usd_micros": True}}, {"g": 5}, {"g": {"usd_micros": 1.5}}],
)
def test_malformed_charges_are_refused(charges: object) -> None:
    """Review R61: a charge is a non-negative integer per grant and unit; anything else an InputError."""
    with pytest.raises(InputError, match="charges"):
        AuditEntry.build(
            index=0, time="2026-11-29T10:15:00.000000Z", kind="outcome", principal="p", charges=charges
        )
