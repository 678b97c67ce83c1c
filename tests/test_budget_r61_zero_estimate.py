"""A model call authorized with an estimate of no prompt tokens (``tokens=(0, 1)``, as a direct
caller of ``Gate.authorize`` may give it: the LangGraph integration and the gateway always estimate
at least one prompt token) is charged the prompt it reports.

Until review R61 an estimate of ``(0, 0)`` reserved nothing (a cost of 0 is not reserved) and its
outcome had no reservation to settle: whatever the model reported was never charged, and a budget
already spent out let it run. Review R61 counted one prompt token more for it (``_costs._cost``)
and read its 0 output tokens as no output cap; since review R85 ``Gate.authorize`` refuses an
estimate of 0 output tokens (``InputError``: 0 capped nothing, test_gate_r85_output_zero.py), so
these calls estimate one, and their output is capped at it. That output costs money on
``small``, so these calls no longer reach the R61 branch: test_regress_r85_gate_free_output_estimate.py
holds it, on a model whose output is free.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call

# ``small`` costs 1 micro-dollar a prompt token and 2 an output token (test_gate.POLICY).


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def test_a_zero_estimate_model_call_is_charged_its_reported_usage(setup: Setup) -> None:
    """Review R61: a model call estimated at (0, 1) is charged the prompt it reports and its one
    output token (10 + 2 * 1; the 20 reported are over its max_tokens, review R85)."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(0, 1))
    assert auth.allowed and auth.reservations
    setup.gate.run(auth, lambda: "x", spent=lambda _: (10, 20))
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.budget_delta == 12
    assert setup.gate.ledger.spent(setup.agent.chain.root.id) == 12
    assert setup.gate.verify().ok


def test_a_zero_estimate_model_call_is_refused_on_a_spent_budget(tmp_path: Path) -> None:
    """Review R61: a budget with nothing left refuses a model call estimated at (0, 1)."""
    made = Setup(tmp_path, budget=3)
    try:
        first = made.gate.authorize(made.agent, Call.model("small"), tokens=(1, 1))
        made.gate.run(first, lambda: "x", spent=lambda _: (1, 1))
        assert made.gate.ledger.remaining(made.agent.chain.root.id) == 0
        second = made.gate.authorize(made.agent, Call.model("small"), tokens=(0, 1))
        assert not second.allowed and second.budget_exhausted
    finally:
        made.gate.close()


def test_a_zero_usage_report_is_charged_nothing(setup: Setup) -> None:
    """Review R61: the minimum is the estimate's, not the bill's: usage (0, 0) is charged 0."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(0, 1))
    setup.gate.run(auth, lambda: "x", spent=lambda _: (0, 0))
    assert setup.entries()[-1].budget_delta == 0
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)
