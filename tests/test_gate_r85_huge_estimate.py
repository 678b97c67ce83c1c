"""Review R85: a token estimate whose cost has more than 4,300 digits (``tokens=(10**5000, 1)``)
made ``Gate.authorize`` raise a bare ``ValueError``: the ledger's refusal, and a quota's, wrote the
amount whole into its message, and Python refuses to write an integer that long. Such a call is
now a recorded refusal (``budget_never_fits``, or the quota's ``quota_exceeded``) that quotes the
amount by its size, and ``BudgetLedger.commit``/``reserve`` of such an amount raise
``BudgetExceeded`` (a negative one ``InputError``), as for any amount no budget holds.

Real components: a Gate on a SQLite file (``test_gate``'s policy: a ``usd_micros`` budget of
10,000; ``test_store_quotas``' policy: a quota of 1,000,000 tokens and no budget)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup
from test_store_quotas import QUOTA_POLICY

from agentgate.capabilities import Call
from agentgate.errors import BudgetExceeded, InputError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HUGE = 10**5000  # past Python's 4,300-digit limit on writing an integer in decimal


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def test_an_estimate_too_long_to_write_is_a_recorded_refusal_that_never_fits(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(HUGE, 1))
    assert not auth.allowed and auth.budget_never_fits and auth.audit_index is not None
    (reason,) = auth.reasons
    assert "more than 9223372036854775807 usd_micros" in reason
    assert setup.entries()[-1].kind == "deny"
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_a_quota_refuses_an_estimate_too_long_to_write_quoting_its_size(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = QUOTA_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, unit="tokens")
    gate = Gate(parse_policy(text, source="q.yaml"), SQLiteStore(tmp_path / "q.db"))
    try:
        agent = gate.issue(keys["root"], name="a", key=keys["agent"], role="r")
        auth = gate.authorize(agent, Call.model("small"), tokens=(HUGE, 1))
        assert not auth.allowed and auth.quota_exceeded == "q"
        (reason,) = auth.reasons
        assert (
            f"this call alone counts an integer of {(HUGE + 1).bit_length()} bits: it can never fit" in reason
        )
    finally:
        gate.close()


def test_the_ledger_refuses_an_amount_too_long_to_write_as_more_than_any_budget_holds(setup: Setup) -> None:
    ledger, grant = setup.gate.ledger, setup.agent.chain.root.id
    with pytest.raises(BudgetExceeded, match=r"an amount \(an integer of \d+ bits\) is more than any budget"):
        ledger.reserve(None, [grant], {grant: 10_000}, HUGE)
    reservation = ledger.reserve(None, [grant], {grant: 10_000}, 10)
    with pytest.raises(BudgetExceeded, match=r"an amount \(an integer of \d+ bits\) is more than any budget"):
        ledger.commit(reservation, HUGE)
    with pytest.raises(InputError, match=r"got an integer of \d+ bits"):
        ledger.commit(reservation, -HUGE)
    assert ledger.commit(reservation, 7) == 0  # still open: settled once, at what was used
    assert ledger.spent(grant) == 7
