"""``agentgate budget held`` with one malformed reservation row among good ones (review R69).

A ``budget_reservations`` row edited outside agentgate (its chain no JSON) stopped ``budget
held`` from listing anything: the operator, asked to settle what a killed worker left, saw one
error line and none of the other held reservations. Every readable row is listed now, and each
unreadable one is named on standard error (its id and what is wrong), exit 2. Real components:
a Gate over a SQLite file, the row edited through a second connection, the CLI's ``main``.
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

from agentgate.capabilities import Call
from agentgate.cli.main import main


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _three_held(path: Path) -> tuple[list[str], list[int | None]]:
    books = Books(path)
    try:
        auths = [books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000)) for _ in range(3)]
        books.gate.flush()
    finally:
        books.gate.close()
    return [a.reservations[0][0] for a in auths], [a.audit_index for a in auths]


def _edit(path: Path, sql: str, *args: object) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(sql, args)
        conn.commit()


@pytest.mark.parametrize("as_json", [False, True])
def test_budget_held_lists_every_readable_row_and_names_each_unreadable_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Review R69: one malformed row among three held reservations: ``budget held`` listed none
    (exit 2, one error line). The two readable ones are listed (table or ``--json``), and the
    malformed one is named on standard error, with what is wrong and what to repair, exit 2."""
    path = tmp_path / "agentgate.db"
    (good1, bad, good2), allows = _three_held(path)
    _edit(path, "UPDATE budget_reservations SET chain = 'not json' WHERE id = ?", bad)
    code = main(
        ["budget", "held", "--older-than", "0", "--store", str(path), *(["--json"] if as_json else [])]
    )
    out, err = capsys.readouterr()
    assert code == 2, err
    if as_json:
        assert [row["id"] for row in json.loads(out)] == [good1, good2]
    else:
        assert good1 in out and good2 in out and bad not in out, out
    (line,) = err.strip().splitlines()
    assert line.startswith("agentgate: error: "), line
    assert f"reservation '{bad}' is malformed" in line and "repair" in line, line
    assert f"allow entry {allows[1]}" in line, line


def test_budget_held_names_every_unreadable_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R69: two malformed rows (a chain no JSON, an amount text): each has its line, the
    third reservation is listed."""
    path = tmp_path / "agentgate.db"
    (bad1, good, bad2), _allows = _three_held(path)
    _edit(path, "UPDATE budget_reservations SET chain = 'not json' WHERE id = ?", bad1)
    _edit(path, "UPDATE budget_reservations SET amount = 'x' WHERE id = ?", bad2)
    code = main(["budget", "held", "--older-than", "0", "--json", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert [row["id"] for row in json.loads(out)] == [good]
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert f"'{bad1}'" in lines[0] and "chain" in lines[0], lines
    assert f"'{bad2}'" in lines[1] and "amount is 'x'" in lines[1], lines


def test_budget_held_with_only_unreadable_rows_does_not_say_there_are_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: when every held row is unreadable, the table's ``no held reservations`` would
    be false: standard output is empty, each row named on standard error, exit 2."""
    path = tmp_path / "agentgate.db"
    reservations, _allows = _three_held(path)
    for reservation in reservations:
        _edit(path, "UPDATE budget_reservations SET chain = '[]' WHERE id = ?", reservation)
    code = main(["budget", "held", "--older-than", "0", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    assert len(err.strip().splitlines()) == 3, err
