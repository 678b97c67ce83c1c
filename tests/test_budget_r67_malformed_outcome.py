"""The Gate's outcome write meeting a malformed reservation row (review R67).

A ``budget_reservations`` row edited outside agentgate (its chain or amount no longer what
agentgate writes) is not a passing fault: reading it again gives the same row. Until review R67
the outcome that met one was kept and tried again for ``OUTCOME_RETRY_FOR_S`` (5 minutes) like
one a trigger or a lock timeout refused, failing once a second, then dropped: its call never got
an ``outcome`` entry. It is now written at once, with a reason naming the row, that reservation
left held as it is (a person settles it, or it goes with its grant). Real components: a Gate over
a SQLite file, the row edited through a second connection.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import Books

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import MalformedRow, StoreError
from agentgate.store.ledger import stored_reservation


@pytest.fixture
def books(tmp_path: Path) -> Iterator[Books]:
    made = Books(tmp_path / "agentgate.db")
    yield made
    made.gate.close()


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)  # the row is logged at WARNING, by design
    yield
    logging.disable(logging.NOTSET)


def _edit(books: Books, sql: str, *args: object) -> None:
    path = books.gate.store.path  # type: ignore[attr-defined]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(sql, args)
        conn.commit()


def _outcome(books: Books, index: int) -> AuditEntry | None:
    found = [e for e in books.gate.audit.entries() if e.kind == "outcome" and e.ref == index]
    assert len(found) <= 1, found
    return found[0] if found else None


@pytest.mark.parametrize("edit", ["chain = 'not json'", "amount = 'x'", "chain = '[]'"])
def test_an_outcome_meeting_a_malformed_reservation_row_is_written_at_once_and_leaves_it_held(
    books: Books, edit: str
) -> None:
    """Review R67: an outcome whose reservation row was edited by hand was tried again once a
    second for 5 minutes (a ``StoreError``, taken for a store that refused it for now), and then
    dropped: no outcome entry. It is written at the first try, naming the row in its reasons; the
    reservation is left as it is, held, and nothing is kept to be tried again."""
    auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
    assert auth.allowed, auth.reasons
    (reservation, _unit, _amount), *_ = auth.reservations
    _edit(books, f"UPDATE budget_reservations SET {edit} WHERE id = ?", reservation)
    books.gate.run(auth, lambda: "t", spent=lambda _: (10, 10))
    books.gate.flush()
    assert not books.gate._outcome_refused_at  # nothing being tried again
    assert books.gate._outcomes.take() == []
    outcome = _outcome(books, auth.audit_index)
    assert outcome is not None, "the call's outcome was not written"
    assert outcome.status == "ok"
    assert outcome.budget_delta == 0 and outcome.charges is None  # nothing charged
    assert any(
        f"reservation '{reservation}' is malformed" in r and "left held" in r for r in outcome.reasons
    ), outcome.reasons
    rows = books.gate.store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,))
    assert rows == [("reserved",)]
    assert books.gate.verify().ok


def test_a_malformed_row_is_a_store_error_of_its_own_kind() -> None:
    """Review R67: the error says that the row is the fault, not the store (``MalformedRow``, a
    ``StoreError``: callers that catch ``StoreError`` still do)."""
    with pytest.raises(MalformedRow) as caught:
        stored_reservation("r1", "not json", 5)
    assert isinstance(caught.value, StoreError)
    assert "budget_reservations: the row of reservation 'r1' is malformed" in str(caught.value)
