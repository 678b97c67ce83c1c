"""``Gate.budget_usage(identity)``: what each budget of an identity's chain has spent, beside its
limit. Until review R73 it was named only ``Gate.remaining``, beside ``BudgetLedger.remaining``,
which returns what is left: a caller reading ``gate.remaining(agent)`` as what is left read the
amount spent. ``remaining`` stays, the same method, for callers written against it (a real Gate
on a SQLite file)."""

from __future__ import annotations

from pathlib import Path

from test_gate_run import TwoTenants

from agentgate import Gate
from agentgate.capabilities import Call
from agentgate.store.ledger import BudgetLedger


def test_budget_usage_is_spent_and_limit_and_remaining_is_its_old_name(tmp_path: Path) -> None:
    """Review R73: after one call of a 10-call budget, ``budget_usage`` gives (1 spent, 10 limit)
    for the grant, where the ledger's ``remaining`` gives 9 left; ``Gate.remaining`` is the same
    method under its old name."""
    two = TwoTenants(tmp_path)
    try:
        auth = two.gate.authorize(two.alice, Call.tool("orders", {}), call_id="x1")
        two.gate.run(auth, lambda: "ran")
        assert two.gate.budget_usage(two.alice) == {two.alice.grant_id: (1, 10)}
        assert BudgetLedger(two.gate.store).remaining(two.alice.grant_id) == 9
        assert Gate.remaining is Gate.budget_usage
    finally:
        two.gate.close()
