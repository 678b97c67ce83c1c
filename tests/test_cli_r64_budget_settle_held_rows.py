"""``agentgate budget settle`` never settles alone a reservation that a once-only call holds, however
that call's row in ``agentgate_once`` writes its ``reservations``: the row is read as JSON, not
searched for the id in quotes. A row that is not a JSON list of ids (edited to drop an id's quotes)
is refused with a ``StoreError`` naming the row, nothing settled; one that names the id in another
JSON spelling (``\\u0030`` for ``0``) is the call's, and settle says to use ``tasks settle``. Until
review R64 both were settled alone, leaving the call ``started`` with its reservation settled.

``agentgate budget settle`` never settles alone a reservation that a GPU lease's recorded
decision holds, however that row in ``broker_decisions`` writes its ``reservations``: the row is
read as the broker reads it, not searched for the id in quotes. A row that is not a JSON list of
``[id, unit, amount]`` (edited to drop an id's quotes) is refused with a ``StoreError`` naming the
row, nothing settled; one naming the id in another JSON spelling is the lease's, and settle says
its broker settles it. Until review R64 both were settled alone, and the broker's own settlement
at the lease's end then failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store import open_store
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import OnceCalls

GRANT = "ab" * 32
KEY = "cd" * 32
ESCAPED = '["\\u00{first}{rest}"]'
"""A JSON list naming the id with its first character escaped (``{first}``: its code in hex)."""


def _held_by_a_once_call(path: Path, written: str) -> str:
    """A reservation held by a started once-only call whose row's ``reservations`` is
    ``written``, a format string of the reservation's ``id`` (and ``first``, ``rest``: ``ESCAPED``);
    returns the id."""
    with open_store(path) as store:
        ledger = BudgetLedger(store)
        reservation = ledger.reserve(None, [GRANT], {GRANT: 100}, 5)
        once = OnceCalls(store)
        with store.transaction() as tx:
            once.start(tx, KEY, 0, [reservation])
        with store.transaction() as tx:
            tx.execute(
                "UPDATE agentgate_once SET reservations = ? WHERE key = ?",
                (
                    written.format(id=reservation, first=f"{ord(reservation[0]):02x}", rest=reservation[1:]),
                    KEY,
                ),
            )
    return reservation


def _state(path: Path, reservation: str) -> str:
    with open_store(path) as store:
        return str(store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,))[0][0])


@pytest.fixture
def path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    made = tmp_path / "agentgate.db"
    assert main(["store", "init", "--store", str(made)]) == 0
    assert main(["audit", "checkpoint", "--store", str(made)]) == 0
    capsys.readouterr()
    return made


def test_a_once_row_whose_reservations_lost_their_quotes_is_refused(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: the row's reservations edited to ``[ID]`` (no quotes, no JSON): exit 2, one
    line naming the table and the call, and the reservation still held."""
    reservation = _held_by_a_once_call(path, "[{id}]")
    code = main(["budget", "settle", reservation, "--ran", "--older-than", "0", "--store", str(path)])
    out, err = capsys.readouterr()
    assert _state(path, reservation) == "reserved"
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "agentgate_once" in err and KEY in err and "malformed" in err, err


def test_a_once_row_naming_the_id_in_another_json_spelling_is_the_calls(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: the row's reservations name the id with a JSON escape: still the call's, so
    settle refuses (exit 1) and names ``tasks settle``; the reservation is still held."""
    reservation = _held_by_a_once_call(path, ESCAPED)
    code = main(["budget", "settle", reservation, "--ran", "--older-than", "0", "--store", str(path)])
    out, _ = capsys.readouterr()
    assert _state(path, reservation) == "reserved"
    assert code == 1 and f"agentgate tasks settle {KEY}" in out, out


def test_budget_held_names_the_call_of_a_row_in_another_spelling(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: ``budget held --json`` gives the once-only call's key however its row spells
    the id, as settle reads it."""
    reservation = _held_by_a_once_call(path, ESCAPED)
    assert main(["budget", "held", "--older-than", "0", "--json", "--store", str(path)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == reservation and row["once_key"] == KEY


def _held_by_a_lease(path: Path, spell: str) -> str:
    """A reservation held by GPU lease ``ft-1`` of broker ``default`` whose row's reservations
    are ``spell`` formatted with the reservation's ``id`` (and ``first``, ``rest``: its first
    character's code in hex, the others); returns the id."""
    with open_store(path) as store:
        reservation = BudgetLedger(store).reserve(None, [GRANT], {GRANT: 100}, 5)
        decisions = BrokerDecisionStore(store)
        decisions.add(
            LeaseDecision("ft-1", "did:key:zA", GRANT, "gpu:h100", 0, None, ((reservation, "calls", 5),))
        )
        written = spell.format(id=reservation, first=f"{ord(reservation[0]):02x}", rest=reservation[1:])
        with store.transaction() as tx:
            tx.execute("UPDATE broker_decisions SET reservations = ?", (written,))
    return reservation


def _settle(path: Path, reservation: str) -> int:
    return main(["budget", "settle", reservation, "--ran", "--older-than", "0", "--store", str(path)])


def test_a_lease_row_whose_reservations_lost_their_quotes_is_refused(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: ``[[ID, "calls", 5]]`` (no JSON): exit 2, one line naming the row, the
    reservation still held."""
    reservation = _held_by_a_lease(path, '[[{id}, "calls", 5]]')
    code = _settle(path, reservation)
    out, err = capsys.readouterr()
    assert _state(path, reservation) == "reserved"
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert "broker_decisions" in err and "ft-1" in err and "malformed" in err, err


def test_a_lease_row_naming_the_id_in_another_json_spelling_is_the_leases(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: the id with a JSON escape: still the lease's, refused (exit 1) naming its
    broker, the reservation still held; ``budget held`` names the lease too."""
    reservation = _held_by_a_lease(path, '[["\\u00{first}{rest}", "calls", 5]]')
    code = _settle(path, reservation)
    out, _ = capsys.readouterr()
    assert _state(path, reservation) == "reserved"
    assert code == 1 and "GPU lease ft-1 of broker default" in out, out
    assert main(["budget", "held", "--older-than", "0", "--json", "--store", str(path)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["lease"] == {"broker": "default", "request_id": "ft-1"}


@pytest.mark.parametrize("verb", ["settle", "held"])
def test_a_lease_row_nested_past_the_parsers_depth_is_refused_in_one_line(
    path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """Review R64: reservations nested 100,000 lists deep: ``json.loads`` raises
    ``RecursionError``, which ``broker_decisions`` let out as a traceback (from the broker's
    reads, and since reading every lease row, from ``budget held`` and ``budget settle``). Now a
    ``StoreError`` naming the row: exit 2, one line, the reservation still held."""
    reservation = _held_by_a_lease(path, "[" * 100_000 + "]" * 100_000)
    if verb == "settle":
        code = _settle(path, reservation)
    else:
        code = main(["budget", "held", "--older-than", "0", "--store", str(path)])
    out, err = capsys.readouterr()
    assert _state(path, reservation) == "reserved"
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err[-500:])
    assert "broker_decisions" in err and "ft-1" in err and "malformed" in err, err
