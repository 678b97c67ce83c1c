"""Review R85: the id in a broker journal row's body (agentgate/store/broker_leases.py).

A ``broker_leases`` body's ``id`` was the one field of a stored lease not checked: a list or a
number loaded, and was a ``TypeError`` out of ``Broker.restore`` and ``agentgate broker leases``
(exit 1, a traceback; ``--json`` printed the number as the lease's id), and an id other than the
row's ``lease_id`` loaded as another lease. Now a body whose id is not the row's (text, equal to
its ``lease_id``, or a queue row's ``request_id``) is unreadable state (``MalformedRow``, a
``StoreError``) naming the table and the row; the CLI exits 2 with one line. ``Broker.restore``
given such a lease by hand refuses it with ``BrokerError``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
from test_broker_store import FakeClock, busy_broker

from agentgate.cli.main import main
from agentgate.dispatch.broker import Broker, BrokerSnapshot, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError, MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def _journal_with_body_id(path: Path, table: str, key: str, value: object) -> None:
    """A busy broker's journal at ``path``, the ``id`` of the body of its row ``key`` of ``table``
    then set to ``value``."""
    store = SQLiteStore(path)
    busy_broker(BrokerLeaseStore(store), FakeClock())
    store.close()
    column = "lease_id" if table == "broker_leases" else "request_id"
    db = sqlite3.connect(path)
    with db:
        (body,) = db.execute(f"SELECT body FROM {table} WHERE {column} = ?", (key,)).fetchone()
        data = json.loads(body)
        data["id"] = value
        db.execute(f"UPDATE {table} SET body = ? WHERE {column} = ?", (json.dumps(data), key))
    db.close()


@pytest.mark.parametrize(
    ("table", "key", "value"),
    [
        pytest.param("broker_leases", "keep", ["x"], id="lease-list"),
        pytest.param("broker_leases", "keep", 7, id="lease-number"),
        pytest.param("broker_leases", "keep", "low", id="lease-another-lease"),
        pytest.param("broker_queue", "wait", "other", id="request-another-id"),
    ],
)
def test_a_body_whose_id_is_not_its_row_s_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, key: str, value: object
) -> None:
    path = tmp_path / "agentgate.db"
    _journal_with_body_id(path, table, key, value)
    row = f"{table}: the row of {'lease' if table == 'broker_leases' else 'request'} '{key}' is malformed: its id is"
    store = SQLiteStore(path)
    try:
        with pytest.raises(MalformedRow, match=f"stored state is unreadable: {row}"):
            BrokerLeaseStore(store).load()
    finally:
        store.close()
    for verb in (["leases"], ["leases", "--json"], ["queue"]):
        code = main(["broker", *verb, "--store", str(path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, (verb, code, out, err[-500:])
        assert row in err, err


def test_restore_refuses_a_lease_whose_id_is_not_text() -> None:
    source = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: 1000.0)
    source.submit(GangRequest("job", "a", 2))
    lease = dataclasses.replace(source.leases()[0], id=["x"])  # type: ignore[arg-type]
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: 1000.0)
    with pytest.raises(BrokerError, match=r"^snapshot: lease \['x'\] grants request 'job'"):
        broker.restore(BrokerSnapshot(1000.0, (lease,), ()))
    assert broker.leases() == []
