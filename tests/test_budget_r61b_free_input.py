"""A model priced nothing for its input and something for its output, on a ``usd_micros`` budget,
is charged in money the output it reports.

Until review R61 an estimate of no output tokens (``tokens=(p, 0)``) cost 0 micro-dollars (its
prompt is free, and one prompt token more is free too), so nothing was reserved in ``usd_micros``:
the outcome had no money reservation to charge, the output it reported was never charged, and a
spent budget let it run. Since review R85 ``Gate.authorize`` refuses an estimate of 0 output
tokens (``InputError``, test_gate_r85_output_zero.py): these calls estimate their output, which
always costs money on this model, so they no longer reach the R61 branch of ``_Costs._cost``
(test_regress_r85_gate_free_output_estimate.py holds the part of it a public path reaches).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import POLICY

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

_SMALL = "small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}"
assert _SMALL in POLICY


class PricedSmall:
    """A Gate on a real SQLite file whose model ``small`` costs ``prompt`` micro-dollars a million
    prompt tokens and ``output`` a million output tokens, and an agent with a ``usd_micros``
    budget of ``budget``."""

    def __init__(self, path: Path, budget: int, *, prompt: int, output: int) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
        priced = POLICY.replace(
            _SMALL, f"small: {{{{cost_per_mtok: {{{{input: {prompt}, output: {output}}}}}}}}}"
        )
        text = priced.format(budget=budget, **{n: k.did for n, k in keys.items()})
        self.gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")

    def spent(self) -> int:
        self.gate.flush()
        return self.gate.ledger.spent(self.agent.chain.root.id)


class FreeInput(PricedSmall):
    """``small`` costs 0 an input token and 1 micro-dollar an output token."""

    def __init__(self, path: Path, budget: int) -> None:
        super().__init__(path, budget, prompt=0, output=1_000_000)


@pytest.fixture
def free(tmp_path: Path) -> Iterator[FreeInput]:
    made = FreeInput(tmp_path, budget=10_000)
    yield made
    made.gate.close()


def test_reported_output_of_a_free_input_model_is_charged_in_usd(free: FreeInput) -> None:
    """Review R61: estimated (5, 100) on a model whose input is free, a call that reports (5, 100)
    is charged its 100 output micro-dollars, and its outcome says so."""
    auth = free.gate.authorize(free.agent, Call.model("small"), tokens=(5, 100))
    assert auth.allowed and auth.reservations  # something reserved in usd_micros to settle
    free.gate.run(auth, lambda: "x", spent=lambda _: (5, 100))
    assert free.spent() == 100
    outcome = list(free.gate.audit.entries())[-1]
    assert outcome.kind == "outcome" and outcome.budget_delta == 100
    assert outcome.charges == {free.agent.chain.root.id: {"usd_micros": 100}}
    assert free.gate.verify().ok


def test_a_spent_usd_budget_refuses_a_free_input_estimate(tmp_path: Path) -> None:
    """Review R61: once a usd_micros budget is spent out, a call estimated (5, 1) on a model
    whose input is free is refused: its output would cost money the budget no longer has."""
    made = FreeInput(tmp_path, budget=100)
    try:
        first = made.gate.authorize(made.agent, Call.model("small"), tokens=(5, 100))
        made.gate.run(first, lambda: "x", spent=lambda _: (5, 100))
        assert made.spent() == 100
        second = made.gate.authorize(made.agent, Call.model("small"), tokens=(5, 1))
        assert not second.allowed and second.budget_exhausted
    finally:
        made.gate.close()


def test_a_free_input_call_reporting_no_output_is_charged_nothing(free: FreeInput) -> None:
    """Review R61: what is reserved is only the estimate's minimum: a call that reports (5, 0)
    on the free-input model is charged 0 micro-dollars."""
    auth = free.gate.authorize(free.agent, Call.model("small"), tokens=(5, 1))
    free.gate.run(auth, lambda: "x", spent=lambda _: (5, 0))
    assert free.spent() == 0
    assert free.gate.ledger.usage(free.agent.chain.root.id) == (0, 0)
