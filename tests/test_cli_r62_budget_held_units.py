"""`agentgate budget held` and `agentgate budget settle` (agentgate/cli/budget.py) say the unit
of every amount they print, in the words the policy and the other outputs use (`1 calls`,
`500000 usd_micros`, as `audit explain`'s `charged` lines and `Budget` write them).

Until review R62 the text table showed `amount` alone (its `--json` had the unit): a reader saw
`500` and could not tell micro-dollars from tokens; `budget settle` said `charged 500`."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
from test_cli_r58_held import _cli
from test_gate_once import _new, _policy_text

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

LOOKUP = Call.tool("lookup", {"id": "o-1"})
"""A call of the policy's idempotent tool, which costs 1 of the worker's `calls` budget."""


def _killed_worker(tmp_path: Path) -> Path:
    """A store where a worker was killed after its `lookup` was allowed: one reservation held."""
    keys, path, agent = _new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        assert gate.authorize(agent, LOOKUP).allowed
        gate.flush()
    return path


def test_held_text_names_the_unit_of_each_amount(tmp_path: Path) -> None:
    """Review R62: `budget held`'s table gives each amount with its unit (`1 calls`), and its
    header names the column; until now the line said `1` alone."""
    path = _killed_worker(tmp_path)
    code, out = _cli("budget", "held", "--older-than", "0", "--store", str(path))
    assert code == 0
    header, line = out.splitlines()
    assert "unit" in header.split()
    assert " 1 calls " in line, line


def test_settle_text_names_the_unit_it_charged_or_released(tmp_path: Path) -> None:
    """Review R62: `budget settle` says what it charged or released with its unit."""
    path = _killed_worker(tmp_path)
    (row,) = json.loads(_cli("budget", "held", "--json", "--older-than", "0", "--store", str(path))[1])
    code, out = _cli("budget", "settle", row["id"], "--not-run", "--older-than", "0", "--store", str(path))
    assert code == 0 and ": released 1 calls (audit entry " in out, out


def test_held_on_a_store_made_before_units_were_stored_says_the_unit_is_unknown(tmp_path: Path) -> None:
    """Review R62: a store whose reservations have neither `unit` nor `entry` (made before
    review R61) is listed, read only, each amount marked `(unit unknown)`, never a unit guessed;
    its `--json` unit is null."""
    path = _killed_worker(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute("ALTER TABLE budget_reservations DROP COLUMN unit")
        old.execute("ALTER TABLE budget_reservations DROP COLUMN entry")
        old.commit()
    code, out = _cli("budget", "held", "--older-than", "0", "--store", str(path))
    assert code == 0
    (line,) = out.splitlines()[1:]
    assert " 1 (unit unknown) " in line, line
    (row,) = json.loads(_cli("budget", "held", "--json", "--older-than", "0", "--store", str(path))[1])
    assert row["unit"] is None and row["amount"] == 1
    code, out = _cli("budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", str(path))
    assert code == 0 and ": charged 1 (unit unknown) (audit entry " in out, out


def test_a_unit_written_outside_agentgate_is_escaped(tmp_path: Path) -> None:
    """Review R62: a unit edited into the row by hand (a line break and an escape sequence) is
    printed escaped, on the reservation's one line."""
    path = _killed_worker(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE budget_reservations SET unit = 'calls\n\x1b[31mFAKE'")
        conn.commit()
    code, out = _cli("budget", "held", "--older-than", "0", "--store", str(path))
    assert code == 0 and len(out.splitlines()) == 2 and "\x1b" not in out, out


@pytest.mark.postgres
def test_held_on_a_postgresql_store_made_before_units_were_stored(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R62: the same on PostgreSQL: a `budget_reservations` without `unit` and `entry`
    is listed with `(unit unknown)`, its `--json` unit null."""
    from agentgate.store._postgres import PostgresStore

    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), PostgresStore(postgres_url)) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, LOOKUP).allowed
        gate.flush()
    with PostgresStore(postgres_url) as store, store.transaction() as tx:
        tx.execute("ALTER TABLE budget_reservations DROP COLUMN unit, DROP COLUMN entry")
    code, out = _cli("budget", "held", "--older-than", "0", "--store", postgres_url)
    assert code == 0
    (line,) = out.splitlines()[1:]
    assert " 1 (unit unknown) " in line, line
    (row,) = json.loads(_cli("budget", "held", "--json", "--older-than", "0", "--store", postgres_url)[1])
    assert row["unit"] is None


@pytest.mark.parametrize("unit", ["calls\n", "Bad Unit", "x" * 5000, ""])
def test_a_stored_unit_that_is_no_unit_is_unknown_and_never_logged_as_a_charge(
    tmp_path: Path, unit: str
) -> None:
    """Review R62: a reservation row whose unit was edited outside agentgate into what no budget
    is in (a line break, capitals and a space, 5,000 characters) is listed `(unit unknown)`,
    `--json` null, and settled as one made before units were stored: charged, its outcome
    without `charges`. Until now the text went into the signed log as a unit charged."""
    path = _killed_worker(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE budget_reservations SET unit = ?", (unit,))
        conn.commit()
    code, out = _cli("budget", "held", "--older-than", "0", "--store", str(path))
    assert code == 0 and " 1 (unit unknown) " in out.splitlines()[1], out
    (row,) = json.loads(_cli("budget", "held", "--json", "--older-than", "0", "--store", str(path))[1])
    assert row["unit"] is None
    code, out = _cli("budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", str(path))
    assert code == 0 and ": charged 1 (unit unknown) (audit entry " in out, out
    with SQLiteStore(path) as store:
        (logged,) = store.query("SELECT entry FROM audit_log ORDER BY idx DESC LIMIT 1")
    text = bytes(logged[0]).decode()
    assert '"kind":"outcome"' in text and '"charges"' not in text, text
