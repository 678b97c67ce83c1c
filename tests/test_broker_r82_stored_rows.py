"""Review R82: the broker journal's lease and queue rows read back (agentgate/store/broker_leases.py).

A JSON value nested past the parser's depth in ``broker_leases.body``, ``broker_queue.body``,
``nominated`` or ``victims`` was a ``RecursionError`` traceback out of ``BrokerLeaseStore.load`` and
``agentgate broker leases``/``queue`` (exit 1), a queue body that is no JSON object (``"x"``) an
``AttributeError``, and a ``submitted_at`` of ``"inf"`` loaded; ``broker_decisions`` has read such
nesting as a malformed row since review R64. Each row is now read by one helper per table, and any
such row is unreadable state (``MalformedRow``, a ``StoreError``) naming its table and row; the CLI
exits 2 with one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_broker_store import FakeClock, busy_broker

from agentgate.cli.main import main
from agentgate.errors import MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore

NESTED = "[" * 100_000 + "]" * 100_000


def _journal_with(path: Path, table: str, column: str, value: object) -> None:
    """A busy broker's journal at ``path``, ``column`` of every row of ``table`` then set to ``value``."""
    store = SQLiteStore(path)
    busy_broker(BrokerLeaseStore(store), FakeClock())
    store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE {table} SET {column} = ?", (value,))
    db.close()


@pytest.mark.parametrize(
    ("table", "column", "value", "row"),
    [
        pytest.param("broker_leases", "body", NESTED, "broker_leases: the row of lease", id="lease-body"),
        pytest.param("broker_queue", "body", NESTED, "broker_queue: the row of request", id="queue-body"),
        pytest.param("broker_queue", "nominated", NESTED, "broker_queue: the row of request", id="nominated"),
        pytest.param("broker_queue", "victims", NESTED, "broker_queue: the row of request", id="victims"),
        pytest.param("broker_queue", "body", '"x"', "broker_queue: the row of request", id="queue-body-text"),
        pytest.param(
            "broker_queue", "submitted_at", "inf", "broker_queue: the row of request", id="submitted-inf"
        ),
    ],
)
def test_a_row_that_holds_no_lease_or_request_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, column: str, value: str, row: str
) -> None:
    path = tmp_path / "agentgate.db"
    _journal_with(path, table, column, value)
    store = SQLiteStore(path)
    try:
        with pytest.raises(MalformedRow, match=rf"stored state is unreadable: {row} '[a-z]+' is malformed"):
            BrokerLeaseStore(store).load()
    finally:
        store.close()
    code = main(["broker", "queue", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err[-500:])
    assert row in err, err
