"""The SQLite store's errors (agentgate/store/_sqlite.py) quote SQLite's words through
`driver_error_line`, as the PostgreSQL side and the audit log do: a driver message of several
lines (a trigger's `RAISE` text, which whoever wrote the file chose) becomes one line.

Until review R62 the SQLite wrappers quoted `str(exc)` as it was: a `StoreError` a library caller
logged could carry line breaks that forge log lines."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from pathlib import Path

import pytest
from test_gate_once import _new, _policy_text

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.ledger import BudgetLedger

HOSTILE = "refused\nagentgate: forged line\r\n\tend"
"""A trigger's message: what a hostile or careless writer of the file may have SQLite say."""


def _with_trigger(path: Path, table: str, when: str) -> None:
    """Put a trigger on ``table`` that refuses every ``when`` (INSERT, UPDATE) with ``HOSTILE``."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        message = HOSTILE.replace("'", "''")
        conn.execute(
            f"CREATE TRIGGER hostile BEFORE {when} ON {table} BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
        conn.commit()


def test_a_statements_multi_line_error_is_one_line(tmp_path: Path) -> None:
    """Review R62: a statement SQLite refuses with a message of several lines ends the
    transaction in a `StoreError` of one line, nothing written."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store, store.transaction() as tx:
        tx.execute("CREATE TABLE t (x INTEGER)")
    _with_trigger(path, "t", "INSERT")
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError) as caught, store.transaction() as tx:
            tx.execute("INSERT INTO t VALUES (1)")
        said = str(caught.value)
        assert "\n" not in said and "\r" not in said and "\t" not in said, said
        assert said.endswith("refused agentgate: forged line end"), said
        assert store.query("SELECT COUNT(*) FROM t") == [(0,)]


def test_a_write_to_a_store_open_to_read_only_is_one_line(tmp_path: Path) -> None:
    """Review R62: the refusal of a write to a store open to read only quotes SQLite's words on
    one line (`attempt to write a readonly database`)."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        BudgetLedger(store)
    with (
        SQLiteStore(path, create=False, read_only=True) as store,
        pytest.raises(StoreError, match="open to read only") as caught,
        store.transaction() as tx,
    ):
        tx.execute("INSERT INTO budget_ledger VALUES ('g', 1, 1, 0)")
    assert "\n" not in str(caught.value) and "readonly database" in str(caught.value)


def test_a_corrupted_file_is_one_line(tmp_path: Path) -> None:
    """Review R62: a file that is no database (its header overwritten) is a `StoreError` of one line."""
    path = tmp_path / "s.db"
    path.write_bytes(b"not a database\n" * 512)
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert "\n" not in str(caught.value), str(caught.value)


def test_budget_settle_against_a_hostile_trigger_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: `budget settle` of a reservation whose row a trigger refuses to change, with a
    message of several lines, exits 2 with one error line; no outcome is written."""
    keys, path, agent = _new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
        gate.flush()
        entries = gate.audit.size()
    _with_trigger(path, "budget_reservations", "UPDATE")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["budget", "settle", auth.reservations[0][0], "--ran", "--older-than", "0", "--store", str(path)]
        )
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "forged line" in err, err
    assert not err.splitlines()[0].startswith("agentgate: forged")
    with SQLiteStore(path) as store:
        assert store.query("SELECT COUNT(*) FROM audit_log") == [(entries,)]
        assert store.query("SELECT state FROM budget_reservations") == [("reserved",)]
