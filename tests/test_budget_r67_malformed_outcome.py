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
from agentgate.cli.main import main
from agentgate.errors import MalformedRow, StoreError
from agentgate.store import SQLiteStore
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


@pytest.mark.parametrize("spent", [(10, 10), (100_000, 100)], ids=["refund", "overrun"])
def test_an_outcome_whose_budget_row_was_deleted_is_written_and_leaves_the_reservation_held(
    books: Books, spent: tuple[int, int]
) -> None:
    """Review R67: a reservation naming a grant whose ``budget_ledger`` row was deleted outside
    agentgate: its settlement charging an overrun ended in ``IndexError`` (the outcome dropped,
    logged "list index out of range"), and one refunding marked the reservation settled while
    writing nothing to any budget. Both are ``MalformedRow`` naming the reservation and the
    grant: the outcome is written without settling it, the reservation left held."""
    auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
    assert auth.allowed, auth.reasons
    (reservation, _unit, _amount), *_ = auth.reservations
    _edit(books, "DELETE FROM budget_ledger")
    books.gate.run(auth, lambda: "t", spent=lambda _: spent)
    books.gate.flush()
    outcome = _outcome(books, auth.audit_index)
    assert outcome is not None, "the call's outcome was not written"
    assert outcome.budget_delta == 0 and outcome.charges is None
    assert any("which has no budget_ledger row" in r and "left held" in r for r in outcome.reasons), (
        outcome.reasons
    )
    rows = books.gate.store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,))
    assert rows == [("reserved",)]


@pytest.mark.parametrize("said", ["--ran", "--not-run"])
def test_budget_settle_of_a_reservation_whose_budget_row_was_deleted_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], said: str
) -> None:
    """Review R67: ``agentgate budget settle`` of a reservation naming a grant without a budget
    row marked it settled and wrote nothing to any budget (its outcome said the grant was
    charged). It exits 2 with one line naming the reservation and the grant, escaped, and writes
    nothing: the reservation is still held, no outcome is logged."""
    books = Books(tmp_path / "agentgate.db")
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        (reservation, _unit, _amount), *_ = auth.reservations
        books.gate.flush()
        _edit(books, "DELETE FROM budget_ledger")
        logged = books.gate.audit.size()
    finally:
        books.gate.close()
    argv = [
        "budget",
        "settle",
        reservation,
        said,
        "--older-than",
        "0",
        "--store",
        str(tmp_path / "agentgate.db"),
    ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "which has no budget_ledger row" in err and len(err.strip().splitlines()) == 1, err
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        assert store.query("SELECT state FROM budget_reservations") == [("reserved",)]
        assert store.query("SELECT COUNT(*) FROM audit_log") == [(logged,)]
