"""The GPU broker's leases and queue, kept in the store so that ``agentgate broker`` can show them.

Tables (DDL per dialect below), each keyed by the broker's name so that several brokers can share
one store:

- ``broker_state(broker, taken_at)``: when the broker last wrote its state.
- ``broker_leases(broker, lease_id, tenant, priority, gpus, state, granted_at, expires_at,
  notice_deadline, preempted_by, body)``: one row per live lease; ``gpus`` is a JSON list of GPU
  ids and ``body`` the whole lease as JSON.
- ``broker_queue(broker, request_id, position, tenant, priority, gpus, submitted_at, deadline,
  nominated, victims, body)``: one row per waiting request in scheduling order; ``deadline`` is
  NULL for a request nominated by preemption (it no longer times out); ``body`` is the request
  as JSON, with ``"draining": true`` added for a draining reservation.

- ``broker_writer(broker, writer)``: the journal instance (one broker process) that writes the
  state; see "One writer" below.

``save`` replaces one broker's rows in one transaction, so a reader sees one whole snapshot or
the previous one, never a mix. The broker process is the authority; these rows are its last
written state, which is why the CLI prints ``taken_at``.

One writer. Two broker processes under one name would each grant the GPUs the other holds and
overwrite each other's state. A journal therefore writes only while it is the name's writer: the
first write after ``take_over`` (which ``Broker.restore`` calls: a restarted broker takes over)
makes a journal the writer; any other write succeeds only if it was the writer already, or if
the name has none. The process taken over from fails closed: its next write raises
``StoreError`` (its broker's events stay queued, never returned), and so does a fresh broker
that did not restore the name's state.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

from agentgate.dispatch.broker import (
    BrokerSnapshot,
    GangRequest,
    Lease,
    QueuedRequest,
    TopologyConstraint,
    WorkloadHint,
)
from agentgate.errors import BrokerError, StoreError
from agentgate.store._base import Dialect, Store

_TABLES = """
CREATE TABLE IF NOT EXISTS broker_state (
    broker TEXT PRIMARY KEY,
    taken_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS broker_leases (
    broker TEXT NOT NULL,
    lease_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL,
    gpus TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('active', 'notified')),
    granted_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    notice_deadline {real},
    preempted_by TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (broker, lease_id)
);
CREATE TABLE IF NOT EXISTS broker_writer (
    broker TEXT PRIMARY KEY,
    writer TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS broker_queue (
    broker TEXT NOT NULL,
    request_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    priority INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    submitted_at {real} NOT NULL,
    deadline {real},
    nominated TEXT NOT NULL,
    victims TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (broker, request_id)
);
"""

BROKER_DDL: dict[Dialect, str] = {
    "sqlite": _TABLES.format(real="REAL"),
    "postgresql": _TABLES.format(real="DOUBLE PRECISION"),
}


class BrokerLeaseStore:
    """One broker's state in a ``Store``; usable as the broker's ``LeaseJournal``.

    Raises ``StoreError`` when the store cannot be reached or its rows cannot be read back.
    """

    def __init__(self, store: Store, broker: str = "default") -> None:
        self.store = store
        self.broker = broker
        self.writer = uuid.uuid4().hex
        """This journal's id in ``broker_writer``."""
        self._taking_over = False
        store.ensure_schema("broker_leases", BROKER_DDL)

    def save(self, snapshot: BrokerSnapshot) -> None:
        """Replace this broker's stored state with ``snapshot``, atomically.

        Raises ``StoreError``, writing nothing, when another journal is the broker name's writer
        and this one has not loaded the state since (module docstring, "One writer").
        """
        leases = [
            (
                self.broker,
                lease.id,
                lease.tenant,
                lease.priority,
                json.dumps(list(lease.gpus)),
                lease.state,
                lease.granted_at,
                lease.expires_at,
                lease.notice_deadline,
                lease.preempted_by,
                json.dumps(_lease_to_json(lease), sort_keys=True),
            )
            for lease in snapshot.leases
        ]
        queue = [
            (
                self.broker,
                q.request.id,
                position,
                q.request.tenant,
                q.request.priority,
                q.request.gpus,
                q.submitted_at,
                q.deadline if math.isfinite(q.deadline) else None,
                json.dumps(list(q.nominated)),
                json.dumps(list(q.victims)),
                json.dumps(_queued_to_json(q), sort_keys=True),
            )
            for position, q in enumerate(snapshot.queue)
        ]
        with self.store.transaction() as tx:
            claim = (
                "INSERT INTO broker_writer (broker, writer) VALUES (?, ?) "
                "ON CONFLICT (broker) DO UPDATE SET writer = excluded.writer"
            )
            if not self._taking_over:
                claim += " WHERE broker_writer.writer = excluded.writer"
            tx.execute(claim, (self.broker, self.writer))
            if tx.rowcount != 1:
                raise StoreError(
                    f"broker {self.broker!r} is journaled by another broker process: two brokers "
                    "under one name would grant the same GPUs; restore its saved state to take "
                    "over (a restart), or give this broker another name"
                )
            tx.execute("DELETE FROM broker_leases WHERE broker = ?", (self.broker,))
            tx.execute("DELETE FROM broker_queue WHERE broker = ?", (self.broker,))
            tx.execute("DELETE FROM broker_state WHERE broker = ?", (self.broker,))
            tx.execute(
                "INSERT INTO broker_state (broker, taken_at) VALUES (?, ?)", (self.broker, snapshot.taken_at)
            )
            if leases:
                tx.executemany(
                    "INSERT INTO broker_leases (broker, lease_id, tenant, priority, gpus, state, granted_at,"
                    " expires_at, notice_deadline, preempted_by, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    leases,
                )
            if queue:
                tx.executemany(
                    "INSERT INTO broker_queue (broker, request_id, position, tenant, priority, gpus,"
                    " submitted_at, deadline, nominated, victims, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    queue,
                )
        self._taking_over = False

    def take_over(self) -> None:
        """Make this journal's next ``save`` take the broker name over from its writer, whose own
        writes then fail. ``Broker.restore`` calls it: a restarted broker takes over."""
        self._taking_over = True

    def load(self) -> BrokerSnapshot | None:
        """The last saved state of this broker, or ``None`` if it never saved one."""
        with self.store.transaction(immediate=False) as tx:
            state = tx.execute("SELECT taken_at FROM broker_state WHERE broker = ?", (self.broker,))
            if not state:
                return None
            lease_rows = tx.execute(
                "SELECT body FROM broker_leases WHERE broker = ? ORDER BY granted_at, lease_id",
                (self.broker,),
            )
            queue_rows = tx.execute(
                "SELECT body, submitted_at, deadline, nominated, victims FROM broker_queue"
                " WHERE broker = ? ORDER BY position",
                (self.broker,),
            )
        try:
            leases = tuple(_lease_from_json(json.loads(row[0])) for row in lease_rows)
            queue = tuple(
                _queued_from_json(
                    json.loads(body),
                    submitted_at=float(submitted_at),
                    deadline=math.inf if deadline is None else float(deadline),
                    nominated=tuple(json.loads(nominated)),
                    victims=tuple(json.loads(victims)),
                )
                for body, submitted_at, deadline, nominated, victims in queue_rows
            )
        except (ValueError, TypeError, KeyError, BrokerError) as exc:
            raise StoreError(f"broker {self.broker!r}: stored state is unreadable: {exc}") from exc
        return BrokerSnapshot(float(state[0][0]), leases, queue)


def _request_to_json(request: GangRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "tenant": request.tenant,
        "gpus": request.gpus,
        "priority": request.priority,
        "hint": {"bound": request.hint.bound, "kind": request.hint.kind},
        "topology": None
        if request.topology is None
        else {"level": request.topology.level, "required": request.topology.required},
        "gpu_type": request.gpu_type,
        "min_memory_gb": request.min_memory_gb,
        "timeout_s": request.timeout_s,
        "ttl_s": request.ttl_s,
        "grace_s": request.grace_s,
        "holder": request.holder,
    }


def _request_from_json(data: dict[str, Any]) -> GangRequest:
    topology = data["topology"]
    return GangRequest(
        **{
            **data,
            "hint": WorkloadHint(**data["hint"]),
            "topology": None if topology is None else TopologyConstraint(**topology),
        }
    )


def _queued_to_json(queued: QueuedRequest) -> dict[str, Any]:
    """A queue row's body: the request, and ``draining: true`` for a draining reservation (which,
    unlike one made by preemption, still times out and counts against ``max_draining``)."""
    body = _request_to_json(queued.request)
    if queued.draining:
        body["draining"] = True
    return body


def _queued_from_json(
    data: dict[str, Any],
    *,
    submitted_at: float,
    deadline: float,
    nominated: tuple[str, ...],
    victims: tuple[str, ...],
) -> QueuedRequest:
    draining = data.pop("draining", False)
    if not isinstance(draining, bool):
        raise ValueError(f"draining must be true or false, got {draining!r}")
    return QueuedRequest(_request_from_json(data), submitted_at, deadline, nominated, victims, draining)


def _lease_to_json(lease: Lease) -> dict[str, Any]:
    return {
        "id": lease.id,
        "request": _request_to_json(lease.request),
        "gpus": list(lease.gpus),
        "granted_at": lease.granted_at,
        "expires_at": lease.expires_at,
        "notice_deadline": lease.notice_deadline,
        "preempted_by": lease.preempted_by,
        "preempt_reason": lease.preempt_reason,
        "level": lease.level,
    }


def _lease_from_json(data: dict[str, Any]) -> Lease:
    return Lease(**{**data, "request": _request_from_json(data["request"]), "gpus": tuple(data["gpus"])})
