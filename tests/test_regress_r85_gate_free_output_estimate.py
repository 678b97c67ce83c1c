"""Review R85b: since review R85 ``Gate.authorize`` refuses an estimate of 0 output tokens, so
test_budget_r61_zero_estimate.py and test_budget_r61b_free_input.py moved to estimates of one
output token on ``small``, whose output costs money: neither reaches the R61 branch of
``_Costs._cost`` (an estimate that costs nothing counts one prompt token more) any longer, and
both would pass with it gone. The branch is still reached through ``Gate.authorize`` by a model
whose output is free (priced 0) and whose prompt is not, estimated ``(0, k)`` on a ``usd_micros``
budget (docs/audit-format.md): these tests hold it there.

Real components: a Gate on a SQLite file (``test_gate``'s policy, with ``small`` priced 3
micro-dollars a prompt token and nothing an output token)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_budget_r61b_free_input import PricedSmall

from agentgate.capabilities import Call


class FreeOutput(PricedSmall):
    """``small`` costs 3 micro-dollars a prompt token and nothing an output token."""

    def __init__(self, path: Path, budget: int) -> None:
        super().__init__(path, budget, prompt=3_000_000, output=0)


@pytest.fixture
def free(tmp_path: Path) -> Iterator[FreeOutput]:
    made = FreeOutput(tmp_path, budget=10_000)
    yield made
    made.gate.close()


def test_an_estimate_that_costs_nothing_reserves_one_prompt_tokens_price(free: FreeOutput) -> None:
    auth = free.gate.authorize(free.agent, Call.model("small"), tokens=(0, 1))
    assert auth.allowed
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 3)]


def test_a_spent_budget_refuses_an_estimate_that_costs_nothing(tmp_path: Path) -> None:
    made = FreeOutput(tmp_path, budget=3)
    try:
        first = made.gate.authorize(made.agent, Call.model("small"), tokens=(1, 1))
        made.gate.run(first, lambda: "x", spent=lambda _: (1, 1))
        assert made.spent() == 3
        second = made.gate.authorize(made.agent, Call.model("small"), tokens=(0, 5))
        assert not second.allowed and second.budget_exhausted
    finally:
        made.gate.close()


def test_the_usage_reported_after_an_estimate_that_costs_nothing_is_charged(free: FreeOutput) -> None:
    auth = free.gate.authorize(free.agent, Call.model("small"), tokens=(0, 1))
    free.gate.run(auth, lambda: "x", spent=lambda _: (10, 1))
    assert free.spent() == 30
    outcome = list(free.gate.audit.entries())[-1]
    assert outcome.kind == "outcome" and outcome.budget_delta == 30
    assert outcome.charges == {free.agent.chain.root.id: {"usd_micros": 30}}
    assert free.gate.verify().ok
