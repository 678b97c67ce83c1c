"""The GPU broker's leases and queue, kept in the store so that ``agentgate broker`` can show them.

Tables (DDL per dialect below), each keyed by the broker's name so that several brokers can share
one store:

- ``broker_state(broker, taken_at, generation)``: when the broker last wrote its state, and how
  many times it was written (each save adds one; see "One writer").
- ``broker_leases(broker, lease_id, tenant, priority, gpus, state, granted_at, expires_at,
  notice_deadline, preempted_by, body)``: one row per live lease; ``gpus`` is a JSON list of GPU
  ids and ``body`` the whole lease as JSON.
- ``broker_queue(broker, request_id, position, tenant, priority, gpus, submitted_at, deadline,
  nominated, victims, body)``: one row per waiting request in scheduling order; ``deadline`` is
  when it times out, nominated or not (review R36; until review R82 this said NULL for a
  nominated request), NULL for an infinite one; ``body`` is the request as JSON, with
  ``"draining": true`` added for a draining reservation.

- ``broker_writer(broker, writer)``: the journal instance (one broker process) that writes the
  state; see "One writer" below.

``save`` replaces one broker's state in one transaction, so a reader sees one whole snapshot or
the previous one, never a mix. The broker process is the authority; these rows are its last
written state, which is why the CLI prints ``taken_at``.

Writes (review R90). A journal remembers what its last ``save`` stored, and the next one writes
the difference: the rows of leases and requests gone are deleted, the new or changed ones written
(a waiting request moved down the queue changes its ``position``; its body is encoded again only
when the request or ``draining`` changed). The whole state is written (every row of the name
deleted first) by a journal's first write, a write that takes the name over, the write after one
that failed (what it left stored is not known), and one that finds a generation it did not write;
``forget_written`` asks for it after the rows were changed by hand. Until review R90 every write
was whole: with 2,000 requests waiting a submit and its release cost three to eight times as much
in the runs measured (``benchmarks/broker.py``, ``journal_*`` figures: 12 ms against 61 ms, 24
against 99, 12 against 40). Building the snapshot is still linear in the
queue's length.

One writer. Two broker processes under one name would each grant the GPUs the other holds and
overwrite each other's state. A journal therefore writes only while it is the name's writer: the
first write after ``take_over`` (which ``Broker.restore`` calls: a restarted broker takes over)
makes a journal the writer; any other write succeeds only if it was the writer already, or if
the name has none. The process taken over from fails closed: its next write raises
``NotWriter``, a ``StoreError`` (its broker's events stay queued, never returned), and so does a
fresh broker that did not restore the name's state. ``NotWriter`` is told apart from a store that
fails (review R96): the broker is not the authority, so ``Broker.renew`` answers ``LeaseLost``,
not the ``StoreError`` that says renewed.

Taking over is tied to the state restored (review R40): ``load`` remembers the ``generation`` it
read, and the claiming write succeeds only while the stored generation is still that one. A write
of the old process between the new one's ``load`` and its first write (or a second replica that
took over first) changes it, and the claiming write raises ``NotWriter``, writing nothing: the
new broker must load the state again. A journal that restores a snapshot it did not load itself
takes over only if the stored state is that snapshot (or there is none).

Rows written before review R68: a lease or waiting request whose ``gpu_type`` is not ASCII or
whose text holds a NUL, which this version refuses, is set aside by ``load`` (``set_aside``, a
warning of ``agentgate.broker``), not restored, rather than failing the whole state (review R69).

Upgrade: ``broker_state`` made before review R40 lacks ``generation``. SQLite adds it on open; on
PostgreSQL ``agentgate store init`` run as the schema's owner adds it (an application role that
may not alter the table gets a ``StoreError`` that says so), as for the tables a version adds.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any, Literal, get_args

from agentgate._names import first_non_ascii
from agentgate._shown import quoted
from agentgate.dispatch.broker import (
    BrokerSnapshot,
    GangRequest,
    Lease,
    Level,
    PreemptReason,
    QueuedRequest,
    TopologyConstraint,
    WorkloadHint,
)
from agentgate.dispatch.broker._model import LEASE_TIMES, taken_at_refused, time_refused
from agentgate.errors import BrokerError, MalformedRow, NotWriter, StoreError
from agentgate.store._base import MAX_STORED_INTEGER, Dialect, Row, Store, Transaction, add_sqlite_columns

_TABLES = """
CREATE TABLE IF NOT EXISTS broker_state (
    broker TEXT PRIMARY KEY,
    taken_at {real} NOT NULL,
    generation {integer} NOT NULL DEFAULT 0
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

_ADD_GENERATION_PG = """
DO $$
BEGIN
    -- A broker_state made before review R40: the column is added by its owner (store init).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('broker_state')
                   AND attname = 'generation' AND NOT attisdropped) THEN
        ALTER TABLE broker_state ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
    END IF;
END;
$$;
"""

BROKER_DDL: dict[Dialect, str] = {
    "sqlite": _TABLES.format(real="REAL", integer="INTEGER"),
    "postgresql": _TABLES.format(real="DOUBLE PRECISION", integer="BIGINT") + _ADD_GENERATION_PG,
}

_log = logging.getLogger("agentgate.broker")

_LOAD_TRIES = 5
"""How many times ``load`` reads again a state written while it read (PostgreSQL's READ COMMITTED
shows each statement the commits made before it began)."""


@dataclass(frozen=True)
class SetAside:
    """A stored lease or waiting request that ``load`` left out of the state: one written before
    review R68, whose text this version refuses (a ``gpu_type`` that is not ASCII, a NUL)."""

    kind: Literal["lease", "request"]
    id: str
    field: str
    """The request's field refused: ``id``, ``tenant``, ``gpu_type`` or ``holder``."""
    value: str
    why: str

    def __str__(self) -> str:
        value = ascii(self.value)
        shown = value if len(value) <= 200 else f"{value[:200]}... ({len(self.value)} characters)"
        return (
            f"{self.kind} {ascii(self.id)[:200]} set aside, not restored (written before review R68): "
            f"its {self.field} {shown} {self.why}"
        )


def _written_before_r68(data: dict[str, Any]) -> tuple[str, str, str] | None:
    """The field, value and why of a request's text (stored as JSON) that only a version before
    review R68 wrote, or ``None``. Until review R69 such a row made the whole state unreadable:
    an upgraded broker could not start."""
    for name in ("id", "tenant", "gpu_type", "holder"):
        value = data.get(name)
        if isinstance(value, str) and "\x00" in value:
            return name, value, "holds a NUL character (U+0000), which no request may hold now"
    gpu_type = data.get("gpu_type")
    where = first_non_ascii(gpu_type) if isinstance(gpu_type, str) else None
    if isinstance(gpu_type, str) and where is not None:
        return "gpu_type", gpu_type, f"holds {where}: a GPU type is ASCII now (it could read as another)"
    return None


class BrokerLeaseStore:
    """One broker's state in a ``Store``; usable as the broker's ``LeaseJournal``.

    Raises ``StoreError`` when the store cannot be reached or its rows cannot be read back.
    """

    def __init__(self, store: Store, broker: str = "default") -> None:
        self.store = store
        self._broker = broker
        self.writer = uuid.uuid4().hex
        """This journal's id in ``broker_writer``."""
        self._taking_over = False
        self._restored: BrokerSnapshot | None = None
        """The snapshot ``take_over`` was given (``None``: the one this journal loaded last)."""
        self._loaded: tuple[int | None, BrokerSnapshot | None] | None = None
        """The generation and the state ``load`` read last; ``None`` before the first ``load``."""
        self._written: _Written | None = None
        """What this journal's last ``save`` wrote (module docstring, "Writes"); ``None`` before
        its first, or when the last failed (the rows stored are then not known)."""
        self._lease_rows: dict[str, tuple[Lease, tuple[Any, ...]]] = {}
        self._bodies: dict[str, tuple[GangRequest, bool, str]] = {}
        """Each waiting request's JSON ``body`` as last encoded, with the request and ``draining``
        it encodes."""
        self.set_aside: tuple[SetAside, ...] = ()
        """The rows the last ``load`` left out (``SetAside``), each also logged as a warning to
        ``agentgate.broker``; the restored broker's first write drops them from the store."""
        store.ensure_schema("broker_leases", BROKER_DDL)
        if store.dialect == "sqlite":
            # Added in review R40.
            add_sqlite_columns(store, "broker_state", {"generation": "INTEGER NOT NULL DEFAULT 0"})

    @property
    def broker(self) -> str:
        """The broker name whose rows this journal reads and writes (fixed when it is made: the rows
        it remembers writing are that name's)."""
        return self._broker

    def save(self, snapshot: BrokerSnapshot) -> None:
        """Replace this broker's stored state with ``snapshot``, atomically.

        Raises ``NotWriter`` (a ``StoreError``), writing nothing, when another journal is the
        broker name's writer and this one has not restored the state since, or when it restored
        a state that was written over since (module docstring, "One writer"); ``StoreError`` when
        ``snapshot`` names one lease or waiting request id twice (until review R90 the store's
        unique key refused it), or when the store fails.
        """
        leases = {lease.id: self._lease_row(lease) for lease in snapshot.leases}
        queue = {q.request.id: self._queue_row(q, position) for position, q in enumerate(snapshot.queue)}
        if len(leases) < len(snapshot.leases) or len(queue) < len(snapshot.queue):
            raise _named_twice(self.broker, snapshot)  # a snapshot made by hand: the broker's never does
        self._lease_rows = {key: self._lease_rows[key] for key in leases.keys() & self._lease_rows.keys()}
        self._bodies = {key: self._bodies[key] for key in queue.keys() & self._bodies.keys()}
        written, self._written = self._written, None  # unknown until the write commits
        with self.store.transaction() as tx:
            claim = (
                "INSERT INTO broker_writer (broker, writer) VALUES (?, ?) "
                "ON CONFLICT (broker) DO UPDATE SET writer = excluded.writer"
            )
            if not self._taking_over:
                claim += " WHERE broker_writer.writer = excluded.writer"
            tx.execute(claim, (self.broker, self.writer))
            if tx.rowcount != 1:
                raise NotWriter(
                    f"broker {self.broker!r} is journaled by another broker process: two brokers "
                    "under one name would grant the same GPUs; restore its saved state to take "
                    "over (a restart); another name is only for another cluster's GPUs (a second "
                    "name over these GPUs grants them twice)"
                )
            # After the claim, which locks the name's writer row: every write of this name runs
            # one at a time from here, and this read sees the last one committed.
            generation = _generation(tx, self.broker)
            if self._taking_over and not self._may_take_over(tx, generation):
                raise NotWriter(
                    f"broker {self.broker!r}: its saved state was written over since this broker "
                    "restored it (another broker process still writes it, or took the name over "
                    "first): two brokers under one name would grant the same GPUs; stop the other "
                    "process, then load the saved state again into a new broker"
                )
            if self._taking_over or written is None or written.generation != generation:
                # The rows stored are not known to be this journal's last write: write them all.
                tx.execute("DELETE FROM broker_leases WHERE broker = ?", (self.broker,))
                tx.execute("DELETE FROM broker_queue WHERE broker = ?", (self.broker,))
                written = _Written(0, {}, {})
            tx.execute(
                "INSERT INTO broker_state (broker, taken_at, generation) VALUES (?, ?, ?) "
                "ON CONFLICT (broker) DO UPDATE SET taken_at = excluded.taken_at, generation = excluded.generation",
                (self.broker, snapshot.taken_at, (generation or 0) + 1),
            )
            _write_changes(tx, self.broker, "broker_leases", written.leases, leases)
            _write_changes(tx, self.broker, "broker_queue", written.queue, queue)
        self._written = _Written((generation or 0) + 1, leases, queue)
        self._taking_over = False
        self._restored = None

    def _lease_row(self, lease: Lease) -> tuple[Any, ...]:
        """``lease``'s ``broker_leases`` row: the one written last when the lease is that object
        (a ``Lease`` is immutable; the broker keeps each until it changes)."""
        kept = self._lease_rows.get(lease.id)
        if kept is not None and kept[0] is lease:
            return kept[1]
        row = (
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
        self._lease_rows[lease.id] = (lease, row)
        return row

    def _queue_row(self, q: QueuedRequest, position: int) -> tuple[Any, ...]:
        """``q``'s ``broker_queue`` row at ``position``; its body is encoded again only when its
        request (an immutable ``GangRequest``, the same object while it waits) or ``draining``
        changed."""
        kept = self._bodies.get(q.request.id)
        if kept is not None and kept[0] is q.request and kept[1] == q.draining:
            body = kept[2]
        else:
            body = json.dumps(_queued_to_json(q), sort_keys=True)
            self._bodies[q.request.id] = (q.request, q.draining, body)
        return (
            self.broker,
            q.request.id,
            position,
            q.request.tenant,
            q.request.priority,
            q.request.gpus,
            q.submitted_at,
            q.deadline if math.isfinite(q.deadline) else None,
            _json_ids(q.nominated),
            _json_ids(q.victims),
            body,
        )

    def forget_written(self) -> None:
        """Make the next ``save`` write the whole state, as the first does: after the rows were
        changed by other means than this journal (module docstring, "Writes")."""
        self._written = None
        self._lease_rows.clear()
        self._bodies.clear()

    def take_over(self, snapshot: BrokerSnapshot | None = None) -> None:
        """Make this journal's next ``save`` take the broker name over from its writer, whose own
        writes then fail. ``Broker.restore`` calls it with the ``snapshot`` restored (``None``:
        the one this journal loaded last): a restarted broker takes over. That ``save`` raises
        ``StoreError`` instead if the stored state was written since it was loaded."""
        self._taking_over = True
        self._restored = snapshot

    def _may_take_over(self, tx: Transaction, generation: int | None) -> bool:
        """Whether the state restored is still the stored one (``generation``: the stored one's)."""
        loaded = self._loaded
        restored = self._restored
        if loaded is not None and (restored is None or restored is loaded[1] or restored == loaded[1]):
            # Restored what this journal loaded. Generation 0 is also what a version from before
            # the column writes, every time (a rolling upgrade): then the state itself must be the
            # one loaded (each write changes ``taken_at``).
            if generation != loaded[0]:
                return False
            return generation != 0 or _read(tx, self.broker)[1] == loaded[1]
        if generation is None:
            return True  # nothing stored: no broker wrote this name
        if restored is None:
            return False  # took over without loading what is stored
        return _read(tx, self.broker)[1] == restored

    def load(self) -> BrokerSnapshot | None:
        """The last saved state of this broker, or ``None`` if it never saved one.

        Remembers the state's generation: a broker that restores it takes the name over only
        while the stored state is still that one (module docstring, "One writer")."""
        for _ in range(_LOAD_TRIES):
            with self.store.transaction(immediate=False) as tx:
                generation, snapshot, set_aside = _read_all(tx, self.broker)
                # Read again last: a write committed meanwhile may have changed the rows read.
                if _generation(tx, self.broker) == generation:
                    self._loaded = (generation, snapshot)
                    self.set_aside = set_aside
                    for row in set_aside:
                        _log.warning("broker %r: %s", self.broker, row)
                    return snapshot
        raise StoreError(
            f"broker {self.broker!r}: its state changed while it was read, {_LOAD_TRIES} times; try again"
        )


@dataclass(frozen=True)
class _Written:
    """The state one ``save`` wrote: the generation, and each row by its lease or request id."""

    generation: int
    leases: dict[str, tuple[Any, ...]]
    queue: dict[str, tuple[Any, ...]]


_COLUMNS = {
    "broker_leases": (
        "broker, lease_id, tenant, priority, gpus, state, granted_at, expires_at, notice_deadline, "
        "preempted_by, body"
    ),
    "broker_queue": (
        "broker, request_id, position, tenant, priority, gpus, submitted_at, deadline, nominated, "
        "victims, body"
    ),
}
"""Each table's columns, in the order of its rows (``_lease_row``, ``_queue_row``): the broker name,
the row's id (the key with it), then the rest."""


def _write_changes(
    tx: Transaction,
    broker: str,
    table: Literal["broker_leases", "broker_queue"],
    stored: dict[str, tuple[Any, ...]],
    rows: dict[str, tuple[Any, ...]],
) -> None:
    """Make ``broker``'s rows of ``table`` ``rows``, given that they are ``stored``: delete the
    rows gone, write those new or changed."""
    columns = _COLUMNS[table].split(", ")
    key = columns[1]
    gone = [(broker, row_id) for row_id in stored.keys() - rows.keys()]
    if gone:
        tx.executemany(f"DELETE FROM {table} WHERE broker = ? AND {key} = ?", gone)
    changed = [row for row_id, row in rows.items() if stored.get(row_id) != row]
    if changed:
        update = ", ".join(f"{c} = excluded.{c}" for c in columns[2:])
        tx.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
            f"ON CONFLICT (broker, {key}) DO UPDATE SET {update}",
            changed,
        )


def _json_ids(ids: tuple[str, ...]) -> str:
    """``ids`` as a JSON list (most are empty: a waiting request that is not nominated)."""
    return json.dumps(list(ids)) if ids else "[]"


def _named_twice(broker: str, snapshot: BrokerSnapshot) -> StoreError:
    """The refusal of a ``snapshot`` that names a lease or waiting request id twice."""
    for kind, ids in (
        ("lease", [lease.id for lease in snapshot.leases]),
        ("waiting request", [q.request.id for q in snapshot.queue]),
    ):
        seen: set[str] = set()
        for row_id in ids:
            if row_id in seen:
                return StoreError(
                    f"broker {broker!r}: the state to write names {kind} id {quoted(row_id)} twice; "
                    "nothing was written"
                )
            seen.add(row_id)
    raise AssertionError("no id named twice")


def _generation(tx: Transaction, broker: str) -> int | None:
    """The generation of ``broker``'s stored state; ``None`` when it has none."""
    rows = tx.execute("SELECT generation FROM broker_state WHERE broker = ?", (broker,))
    return _stored_generation(broker, rows[0][0]) if rows else None


def _state_row(broker: str, row: Row) -> tuple[float, int]:
    """A ``broker_state`` row's ``taken_at`` and ``generation``; ``MalformedRow`` (a ``StoreError``)
    naming the table and the column when ``taken_at`` is not a time a date holds
    (``taken_at_refused``, which ``Broker.restore`` checks too) or ``generation`` no count of writes (a row written outside
    agentgate). Until review R82 ``taken_at`` was read with ``float`` alone: ``"soon"`` was a
    ``ValueError`` traceback out of ``load`` and ``agentgate broker leases``, and an infinity or
    ``1e300`` loaded; ``Broker.restore`` moved its clock there, where a ``ttl_s`` added to it
    moves it no more, and every lease ended in the call that granted it, while the CLI showed
    the state "as of -"."""
    taken_at, generation = row
    if (why := taken_at_refused(taken_at)) is not None:
        raise _unreadable(broker, f"broker_state: {why}")
    return float(taken_at), _stored_generation(broker, generation)


def _stored_generation(broker: str, generation: object) -> int:
    """``broker_state.generation`` as read; ``MalformedRow`` when it is not a count of writes that
    one more write still fits in the column (until review R82 a ``ValueError`` traceback, from
    ``load`` and from the broker's next write)."""
    if (
        isinstance(generation, bool)
        or not isinstance(generation, int)
        or not 0 <= generation < MAX_STORED_INTEGER
    ):
        raise _unreadable(
            broker, f"broker_state: its generation is {generation!r:.60}, not a count of writes"
        )
    return generation


def _unreadable(broker: str, what: str) -> MalformedRow:
    """The error for ``broker``'s stored state when a row of it cannot be read back (``what``
    names the table, and the row where it has one)."""
    return MalformedRow(f"broker {broker!r}: stored state is unreadable: {what}")


def _read(tx: Transaction, broker: str) -> tuple[int | None, BrokerSnapshot | None]:
    """The generation and the state of ``broker`` stored, read in ``tx``."""
    return _read_all(tx, broker)[:2]


def _read_all(tx: Transaction, broker: str) -> tuple[int | None, BrokerSnapshot | None, tuple[SetAside, ...]]:
    """The generation and the state of ``broker`` stored, read in ``tx``, and the rows set aside."""
    state = tx.execute("SELECT taken_at, generation FROM broker_state WHERE broker = ?", (broker,))
    if not state:
        return None, None, ()
    taken_at, generation = _state_row(broker, state[0])
    lease_rows = tx.execute(
        "SELECT lease_id, body FROM broker_leases WHERE broker = ? ORDER BY granted_at, lease_id",
        (broker,),
    )
    queue_rows = tx.execute(
        "SELECT request_id, body, submitted_at, deadline, nominated, victims FROM broker_queue"
        " WHERE broker = ? ORDER BY position",
        (broker,),
    )
    rows = [
        *(_lease_row(broker, row) for row in lease_rows),
        *(_queue_row(broker, row) for row in queue_rows),
    ]
    leases = tuple(row for row in rows if isinstance(row, Lease))
    queue = tuple(row for row in rows if isinstance(row, QueuedRequest))
    set_aside = tuple(row for row in rows if isinstance(row, SetAside))
    return generation, BrokerSnapshot(taken_at, leases, queue), set_aside


_NOT_READ = (ValueError, TypeError, KeyError, RecursionError, BrokerError)
"""What reading a stored lease or request raises for a row that holds none: ``RecursionError`` for
JSON nested past the parser's depth (until review R82 a traceback out of ``load`` and the CLI, as
``broker_decisions``' was until review R64)."""


def _lease_row(broker: str, row: Row) -> Lease | SetAside:
    """A ``broker_leases`` row (``lease_id, body``) as the lease its body holds, or set aside when
    only a version before review R68 wrote it; ``MalformedRow`` naming the table and the row when
    it holds no lease."""
    lease_id, body = row
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("its body is not a JSON object")
        request = data.get("request")
        old = _written_before_r68(request) if isinstance(request, dict) else None
        return (
            _lease_from_json(data, lease_id) if old is None else SetAside("lease", str(data.get("id")), *old)
        )
    except _NOT_READ as exc:
        raise _unreadable(
            broker, f"broker_leases: the row of lease {lease_id!r:.80} is malformed: {exc}"
        ) from exc


def _queue_row(broker: str, row: Row) -> QueuedRequest | SetAside:
    """A ``broker_queue`` row (``request_id, body, submitted_at, deadline, nominated, victims``)
    as the waiting request it holds, or set aside when only a version before review R68 wrote it;
    ``MalformedRow`` naming the table and the row when any of them is not what a waiting request
    holds (until review R82 a body that is no JSON object was an ``AttributeError`` traceback, and
    a ``submitted_at`` of infinity loaded)."""
    request_id, body, submitted_at, deadline, nominated, victims = row
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("its body is not a JSON object")
        old = _written_before_r68(data)
        if old is not None:
            return SetAside("request", str(data.get("id")), *old)
        if data["id"] != request_id:  # review R85, as a lease's (``_lease_from_json``)
            raise ValueError(f"its id is {data['id']!r:.80}, not the row's request_id {request_id!r:.80}")
        for name, value in (("submitted_at", submitted_at), ("deadline", deadline)):
            if (why := time_refused(name, value)) is not None:
                raise ValueError(why)
        return _queued_from_json(
            data,
            submitted_at=float(submitted_at),
            deadline=math.inf if deadline is None else float(deadline),
            nominated=_ids(json.loads(nominated), "nominated"),
            victims=_ids(json.loads(victims), "victims"),
        )
    except _NOT_READ as exc:
        raise _unreadable(
            broker, f"broker_queue: the row of request {request_id!r:.80} is malformed: {exc}"
        ) from exc


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


def _lease_from_json(data: dict[str, Any], lease_id: object) -> Lease:
    """The lease a stored body holds, in the row of ``lease_id``; ``ValueError`` naming the field for
    one that is not a lease's. Until review R68 the fields went into ``Lease`` unchecked: an
    ``expires_at`` of ``"soon"`` was a ``TypeError`` out of ``Broker.restore`` and ``agentgate broker
    leases``, and a ``level`` of ``"galaxy"`` was restored as it was; until review R82 an integer
    too large for a float (``10**400``) was an ``OverflowError`` traceback (``math.isfinite``), now
    ``time_refused``'s refusal, which ``Broker.restore`` makes too; until review R85 the ``id`` was
    not checked: a list loaded, and was a ``TypeError`` out of ``Broker.restore`` and the CLI; until
    review R89 neither was the number of its ``gpus``, which must be its request's."""
    if data["id"] != lease_id or not isinstance(data["id"], str):
        raise ValueError(f"its id is {data['id']!r:.80}, not the row's lease_id {lease_id!r:.80}")
    whose = f"lease {data['id']!r:.80}"
    for name in LEASE_TIMES:
        if (why := time_refused(name, data[name])) is not None:
            raise ValueError(f"{whose}: {why}")
    if data["preempted_by"] is not None and not isinstance(data["preempted_by"], str):
        raise ValueError(
            f"{whose}: preempted_by must be a request id or null, got {data['preempted_by']!r:.80}"
        )
    for name, allowed in (("preempt_reason", get_args(PreemptReason)), ("level", get_args(Level))):
        if data[name] is not None and data[name] not in allowed:
            raise ValueError(
                f"{whose}: {name} must be one of {', '.join(allowed)} or null, got {data[name]!r:.80}"
            )
    request, gpus = _request_from_json(data["request"]), _ids(data["gpus"], "gpus")
    if len(gpus) != request.gpus:
        # A lease of no GPUs for an 8-GPU gang loaded, and was restored holding and charging
        # nothing (``Broker.restore`` refuses it too: "a gang of the wrong size").
        raise ValueError(f"{whose}: holds {len(gpus)} GPUs for a gang of {request.gpus}")
    return Lease(**{**data, "request": request, "gpus": gpus})


def _ids(value: object, name: str) -> tuple[str, ...]:
    """``value``, a stored JSON list of ids (GPUs, leases), as a tuple; ``ValueError`` naming
    ``name`` for anything else (a list of lists was a ``TypeError`` out of ``Broker.restore``, and
    a text ``"low"`` was read as the ids ``l``, ``o`` and ``w``, until review R68)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{name} must be a list of ids, got {value!r:.80}")
    return tuple(value)
