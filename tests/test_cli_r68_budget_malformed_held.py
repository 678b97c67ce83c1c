"""A held reservation whose row is malformed, settled by hand (review R68).

A ``budget_reservations`` row edited outside agentgate (its chain no JSON, its amount text) is
left held by the Gate's outcome (review R67), and ``agentgate budget settle`` / ``tasks settle``
refused it naming the row, and no more: the operator was told what was wrong, not what to do,
and the reservation stayed held for good (nothing else settles it, ``store prune`` keeps it). The
refusal now says it cannot be settled as it is, what the row must hold, and where the right
values are (its ``allow`` entry: the grant and the amount); the row repaired as it says is then
settled. Real components: a Gate over a SQLite file, the row edited through a second
connection, the CLI's ``main``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import Books
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.store import SQLiteStore


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _edit(path: Path, sql: str, *args: object) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(sql, args)
        conn.commit()


def _count(path: Path) -> tuple[int, list[tuple[object, ...]]]:
    with SQLiteStore(path) as store:
        (logged,) = store.query("SELECT COUNT(*) FROM audit_log")[0]
        return int(logged), store.query("SELECT state FROM budget_reservations ORDER BY id")


@pytest.mark.parametrize("edit", ["chain = 'not json'", "amount = 'x'"])
def test_budget_settle_of_a_malformed_row_says_what_to_do_and_the_repair_settles_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """Review R68: ``budget settle`` of a reservation whose row was edited said only that the
    row is malformed: the reservation could never be settled. The one line says it cannot be
    settled as it is, that the row's chain and amount must be repaired, and gives the grant
    and the amount its ``allow`` entry records; nothing is written. Repaired so, it settles."""
    path = tmp_path / "agentgate.db"
    books = Books(path)
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        (reservation, _unit, amount), *_ = auth.reservations
        grant = books.bot.grant_id
        books.gate.flush()
    finally:
        books.gate.close()
    _edit(path, f"UPDATE budget_reservations SET {edit} WHERE id = ?", reservation)
    before = _count(path)
    argv = ["budget", "settle", reservation, "--not-run", "--older-than", "0", "--by", "ops"]
    code = main([*argv, "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"reservation '{reservation}' is malformed" in err
    assert "cannot be settled as it is" in err and "repair" in err, err
    assert f"allow entry {auth.audit_index}" in err and f"{amount} of grant {grant}" in err, err
    assert _count(path) == before  # nothing written
    _edit(
        path,
        "UPDATE budget_reservations SET chain = ?, amount = ? WHERE id = ?",
        json.dumps([grant]),
        amount,
        reservation,
    )
    assert main([*argv, "--store", str(path)]) == 0, capsys.readouterr().err
    assert _count(path)[1] == [("released",)]
    with SQLiteStore(path) as store:
        assert store.query("SELECT remaining, cap FROM budget_ledger WHERE grant_id = ?", (grant,)) == [
            (100_000, 100_000)
        ]


def test_budget_held_with_a_malformed_row_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: ``budget held`` met a malformed row and said only that it is malformed (it
    lists nothing until that row is repaired). It now says what to repair and from what."""
    path = tmp_path / "agentgate.db"
    books = Books(path)
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        (reservation, _unit, amount), *_ = auth.reservations
        books.gate.flush()
    finally:
        books.gate.close()
    _edit(path, "UPDATE budget_reservations SET chain = 'not json' WHERE id = ?", reservation)
    code = main(["budget", "held", "--older-than", "0", "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"reservation '{reservation}' is malformed" in err and "repair" in err, err
    assert f"allow entry {auth.audit_index} reserved {amount} of grant {books.bot.grant_id}" in err, err


def test_tasks_settle_of_a_call_whose_reservation_row_is_malformed_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: ``tasks settle`` of a once-only call whose reservation row was edited named
    the row only. It says what to repair, from the call's ``allow`` entry; repaired, it settles."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        (reservation, _unit, amount), *_ = auth.reservations
        gate.flush()
    _edit(path, "UPDATE budget_reservations SET amount = 'x' WHERE id = ?", reservation)
    argv = ["tasks", "settle", auth.once_key, "--ran", "--older-than", "0", "--by", "ops"]
    code = main([*argv, "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "cannot be settled as it is" in err and "repair" in err, err
    assert f"allow entry {auth.audit_index}" in err and f"{amount} of grant {agent.grant_id}" in err, err
    _edit(path, "UPDATE budget_reservations SET amount = ? WHERE id = ?", amount, reservation)
    assert main([*argv, "--store", str(path)]) == 0, capsys.readouterr().err
    assert _count(path)[1] == [("committed",)]
