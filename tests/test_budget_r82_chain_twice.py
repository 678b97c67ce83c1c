"""Review R82: a reservation row whose chain names a grant twice (edited outside agentgate:
``reserve`` refuses such a chain, so agentgate never writes one) was read as valid by
``stored_reservation``, and every settlement then wrote that grant's budget once per mention:
``agentgate budget settle ID --not-run`` refunded it twice (remaining 1,020 of a cap of 1,000),
``--ran`` charged it twice. Such a row is malformed now, as one whose chain is no list of grant
ids: ``budget held`` names it (exit 2), ``budget settle`` refuses it (exit 2, nothing written),
the Gate's own outcome leaves it held."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import Books

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.ledger import stored_reservation


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)  # the row is logged at WARNING, by design
    yield
    logging.disable(logging.NOTSET)


def _doubled(path: Path) -> tuple[str, str, int]:
    """A store at ``path`` holding one reservation of 20 tokens whose chain is edited to name its
    grant twice; the reservation's id, the grant's id and the audit log's size."""
    books = Books(path)
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(10, 10))
        assert auth.allowed, auth.reasons
        (reservation, _unit, _amount), *_ = auth.reservations
        books.gate.flush()
        grant = books.bot.chain.ids[-1]
        logged = books.gate.audit.size()
    finally:
        books.gate.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "UPDATE budget_reservations SET chain = ? WHERE id = ?", (json.dumps([grant, grant]), reservation)
        )
        conn.commit()
    return reservation, grant, logged


def test_a_chain_naming_a_grant_twice_is_a_malformed_row() -> None:
    """Review R82: ``stored_reservation`` refuses a chain with a grant twice, naming the row."""
    with pytest.raises(MalformedRow) as caught:
        stored_reservation("r1", json.dumps(["g1", "g2", "g1"]), 5)
    said = str(caught.value)
    assert "the row of reservation 'r1' is malformed" in said and "names a grant more than once" in said


@pytest.mark.parametrize("said", ["--ran", "--not-run"])
def test_budget_settle_of_a_chain_naming_a_grant_twice_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], said: str
) -> None:
    """Review R82: ``agentgate budget settle`` of such a row exits 2 with one line naming it, and
    writes nothing: the budget is not refunded or charged twice, the reservation stays held."""
    path = tmp_path / "agentgate.db"
    reservation, _grant, logged = _doubled(path)
    with SQLiteStore(path) as store:
        before = store.query("SELECT * FROM budget_ledger")
    code = main(["budget", "settle", reservation, said, "--older-than", "0", "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "names a grant more than once" in err and len(err.strip().splitlines()) == 1, err
    with SQLiteStore(path) as store:
        assert store.query("SELECT * FROM budget_ledger") == before
        assert store.query("SELECT state FROM budget_reservations") == [("reserved",)]
        assert store.query("SELECT COUNT(*) FROM audit_log") == [(logged,)]


def test_budget_held_names_a_chain_naming_a_grant_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R82: ``agentgate budget held`` reports such a row as unreadable (exit 2), where it
    listed it as one to settle."""
    path = tmp_path / "agentgate.db"
    reservation, _grant, _logged = _doubled(path)
    code = main(["budget", "held", "--older-than", "0", "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"reservation '{reservation}' is malformed" in err and "names a grant more than once" in err, err


def test_the_gates_outcome_meeting_a_chain_naming_a_grant_twice_leaves_it_held(tmp_path: Path) -> None:
    """Review R82: the Gate's own outcome of such a call is written, naming the row, and settles
    nothing: the budget keeps what was reserved, not refunded twice."""
    books = Books(tmp_path / "agentgate.db")
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(10, 10))
        (reservation, _unit, _amount), *_ = auth.reservations
        grant = books.bot.chain.ids[-1]
        remaining = books.gate.ledger.remaining(grant)
        with contextlib.closing(sqlite3.connect(tmp_path / "agentgate.db")) as conn:
            conn.execute(
                "UPDATE budget_reservations SET chain = ? WHERE id = ?",
                (json.dumps([grant, grant]), reservation),
            )
            conn.commit()
        books.gate.run(auth, lambda: "t", spent=lambda _: (0, 0))
        books.gate.flush()
        (outcome,) = [e for e in books.gate.audit.entries() if e.kind == "outcome"]
        assert any("names a grant more than once" in r and "left held" in r for r in outcome.reasons)
        assert books.gate.ledger.remaining(grant) == remaining
        rows = books.gate.store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,))
        assert rows == [("reserved",)]
    finally:
        books.gate.close()
