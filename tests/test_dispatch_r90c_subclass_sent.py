"""A ``DispatchError`` subclass whose ``__init__`` does not call ``DispatchError.__init__`` (legal
for any exception) reads as one that may have been sent: ``Gate.run`` of a model call that raises
it settles it as any backend failure, its outcome written and its reservation released (review
R90c: ``sent`` was set only in ``__init__``, and ``Gate.run`` raised ``AttributeError`` instead,
the reservation left held and no outcome written)."""

from __future__ import annotations

import pytest
import test_gate_budgets
from test_gate_budgets import Books

from agentgate.capabilities import Call
from agentgate.errors import DispatchError

# Its fixture, for this module only (a ``pytest_plugins`` entry would reach every module).
books = test_gate_budgets.books


class QuotaFromUpstream(DispatchError):
    """A user's error that sets its own state and never calls ``DispatchError.__init__``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __str__(self) -> str:
        return f"upstream said {self.code}"


def test_a_subclass_that_skips_init_is_settled_as_sent(books: Books) -> None:
    assert QuotaFromUpstream(429).sent is True
    gate = books.gate
    auth = gate.authorize(books.bot, Call.model("big", {"max_tokens": 10}), tokens=(10, 10))
    assert auth.allowed

    def fails() -> None:
        raise QuotaFromUpstream(429)

    with pytest.raises(QuotaFromUpstream, match="upstream said 429"):
        gate.run(auth, fails)
    gate.flush()
    held = gate.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
    assert held[0][0] == 0
    outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
    assert [(e.status, e.reasons) for e in outcomes] == [("error", ("QuotaFromUpstream",))]
