"""Review R68 of the broker's journal read back (agentgate/store/broker_leases.py).

A stored lease's body was made into a ``Lease`` field for field, unchecked: an ``expires_at`` of
``"soon"`` or a ``notice_deadline`` of ``"x"`` loaded, and then ``Broker.restore`` (comparing it
with the clock) and ``agentgate broker leases`` (writing it as a date) ended in a ``TypeError``
traceback; a ``level`` of ``"galaxy"`` or a ``preempt_reason`` of ``7`` was restored as it was;
a ``granted_at`` of null was restored and failed only at the broker's next write, on a NOT NULL
constraint; a GPU or victim id that is no text (a list) was a ``TypeError`` out of the restore.
Each is refused when the state is read, as unreadable state (``StoreError``), as a queue row's
``draining`` is (review B18).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_broker_store import FakeClock, busy_broker

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def _stored(store: SQLiteStore, table: str, changes: dict[str, Any]) -> None:
    """A busy broker's state written to ``store``, then each row of ``table`` changed: its body's
    fields as ``changes`` says (``nominated`` and ``victims``, columns of a queue row, there)."""
    busy_broker(BrokerLeaseStore(store), FakeClock())
    key = "lease_id" if table == "broker_leases" else "request_id"
    with store.transaction() as tx:
        rows = tx.execute(f"SELECT {key}, body FROM {table}")
        assert rows
        for row_id, body in rows:
            columns = {c: json.dumps(changes[c]) for c in ("nominated", "victims") if c in changes}
            fields = {k: v for k, v in changes.items() if k not in columns}
            assignments = ", ".join(["body = ?", *(f"{c} = ?" for c in columns)])
            tx.execute(
                f"UPDATE {table} SET {assignments} WHERE {key} = ?",
                (json.dumps({**json.loads(body), **fields}), *columns.values(), row_id),
            )


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"expires_at": "soon"}, id="expires_at-text"),
        pytest.param({"notice_deadline": "x"}, id="notice_deadline-text"),
        pytest.param({"granted_at": None}, id="granted_at-null"),
        pytest.param({"expires_at": True}, id="expires_at-bool"),
        pytest.param({"level": "galaxy"}, id="level-unknown"),
        pytest.param({"preempt_reason": 7}, id="preempt_reason-number"),
        pytest.param({"preempted_by": ["x"]}, id="preempted_by-list"),
        pytest.param({"gpus": "n000/g0"}, id="gpus-text"),
    ],
)
def test_a_lease_row_whose_fields_are_not_a_lease_s_is_unreadable(
    sqlite_store: SQLiteStore, changes: dict[str, Any]
) -> None:
    """Review R68: a stored lease whose times, level, preemption or GPUs are not what a lease
    holds loaded, and failed later with a ``TypeError`` (restore, the CLI) or was restored as it
    was; it is refused as unreadable state, naming the field."""
    _stored(sqlite_store, "broker_leases", changes)
    (field,) = changes
    with pytest.raises(StoreError, match=rf"stored state is unreadable: .*{field}"):
        BrokerLeaseStore(sqlite_store).load()


def test_a_lease_row_naming_a_gpu_that_is_no_text_is_unreadable(sqlite_store: SQLiteStore) -> None:
    """Review R68: a GPU id stored as a list was a ``TypeError`` (unhashable) out of
    ``Broker.restore``; it is refused as unreadable state."""
    busy_broker(BrokerLeaseStore(sqlite_store), FakeClock())
    with sqlite_store.transaction() as tx:
        for lease_id, body in tx.execute("SELECT lease_id, body FROM broker_leases"):
            data = json.loads(body)
            data["gpus"] = [[gpu] for gpu in data["gpus"]]
            tx.execute("UPDATE broker_leases SET body = ? WHERE lease_id = ?", (json.dumps(data), lease_id))
    with pytest.raises(StoreError, match=r"stored state is unreadable: .*gpus"):
        BrokerLeaseStore(sqlite_store).load()


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"nominated": [["n000/g0"]]}, id="nominated-list-of-lists"),
        pytest.param({"victims": [{"id": "low"}]}, id="victims-objects"),
        pytest.param({"victims": "low"}, id="victims-text"),
    ],
)
def test_a_queue_row_whose_gpus_or_victims_are_not_ids_is_unreadable(
    sqlite_store: SQLiteStore, changes: dict[str, Any]
) -> None:
    """Review R68: a queue row's nominated GPUs or victims stored as lists or objects loaded, and
    ``Broker.restore`` ended in a ``TypeError`` (unhashable); a text ``"low"`` was read as the
    three victims ``l``, ``o`` and ``w``. Each is refused as unreadable state, naming the field."""
    _stored(sqlite_store, "broker_queue", changes)
    (field,) = changes
    with pytest.raises(StoreError, match=rf"stored state is unreadable: .*{field}"):
        BrokerLeaseStore(sqlite_store).load()
