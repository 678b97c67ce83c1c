"""The link from each gated GPU lease to the decision that allowed it, kept in the store.

``GatedBroker`` writes one row per request it queues and deletes it, in the transaction that
settles the lease's budget and appends its last outcome entry, when the lease ends (or the request
times out or is refused by the broker). Because the row lives in the store and not in the
process, a restarted ``GatedBroker`` over the same store still knows, for a lease decided before
the restart, which audit entry decided it, who holds it, and which budget reservations it must
settle.

Table (DDL per dialect below), keyed by the broker's name like ``store/broker_leases.py``:

- ``broker_decisions(broker, request_id, principal, chain_hash, resource, audit_index,
  cost_per_gpu_hour, reservations)``: ``audit_index`` is the index of the decision's audit entry,
  ``cost_per_gpu_hour`` the policy's price of the GPU type when the lease was decided (NULL: not
  priced), ``reservations`` a JSON list of ``[reservation id, unit, amount]`` in the budget ledger
  (the request's, in the order they were taken; a renewal's merged into the one of its unit and
  chain, ``BudgetLedger.merge``, or added after them when there is none).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from agentgate.errors import MalformedRow
from agentgate.store._base import MAX_STORED_INTEGER, Dialect, Row, Store, Transaction

_TABLE = """
CREATE TABLE IF NOT EXISTS broker_decisions (
    broker TEXT NOT NULL,
    request_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    chain_hash TEXT NOT NULL,
    resource TEXT NOT NULL,
    audit_index {int},
    cost_per_gpu_hour {int},
    reservations TEXT NOT NULL,
    PRIMARY KEY (broker, request_id)
);
"""

DECISIONS_DDL: dict[Dialect, str] = {
    "sqlite": _TABLE.format(int="INTEGER"),
    "postgresql": _TABLE.format(int="BIGINT"),
}

Reservation = tuple[str, str, int]
"""(reservation id in the budget ledger, unit, amount reserved)."""

DECISION_COLUMNS = "request_id, principal, chain_hash, resource, audit_index, cost_per_gpu_hour, reservations"


@dataclass(frozen=True)
class LeaseDecision:
    """What a lease's later audit entries and its budget settlement need to know of its decision."""

    request_id: str
    """The request's id, which is also its lease's."""
    principal: str
    """The holder's DID."""
    chain_hash: str
    """The grant the lease was decided under."""
    resource: str
    """``gpu:TYPE``."""
    audit_index: int | None
    """Index of the decision's audit entry, which every outcome entry of the lease refers to."""
    cost_per_gpu_hour: int | None
    """The price the lease is settled at (micro-dollars per GPU-hour); ``None``: free of charge."""
    reservations: tuple[Reservation, ...] = ()
    """Budget reservations held for the lease until it ends."""


class BrokerDecisionStore:
    """One broker's lease decisions in a ``Store``. Raises ``StoreError`` for rows it cannot read."""

    def __init__(self, store: Store, broker: str = "default") -> None:
        self.store = store
        self.broker = broker
        store.ensure_schema("broker_decisions", DECISIONS_DDL)

    def add(self, decision: LeaseDecision, tx: Transaction | None = None) -> bool:
        """Record ``decision``; ``False`` (and nothing written) if its request id already has one."""
        with self.store.within(tx) as t:
            t.execute(
                f"INSERT INTO broker_decisions (broker, {DECISION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (broker, request_id) DO NOTHING",
                (
                    self.broker,
                    decision.request_id,
                    decision.principal,
                    decision.chain_hash,
                    decision.resource,
                    decision.audit_index,
                    decision.cost_per_gpu_hour,
                    _encode(decision.reservations),
                ),
            )
            return t.rowcount == 1

    def get(self, request_id: str, tx: Transaction | None = None) -> LeaseDecision | None:
        """The decision of ``request_id``, or ``None``; read in ``tx`` when given."""
        sql = f"SELECT {DECISION_COLUMNS} FROM broker_decisions WHERE broker = ? AND request_id = ?"
        params = (self.broker, request_id)
        rows = tx.execute(sql, params) if tx is not None else self.store.query(sql, params)
        return decoded_decision(rows[0]) if rows else None

    def all(self) -> list[LeaseDecision]:
        """Every recorded decision of this broker, by request id."""
        rows = self.store.query(
            f"SELECT {DECISION_COLUMNS} FROM broker_decisions WHERE broker = ? ORDER BY request_id",
            (self.broker,),
        )
        return [decoded_decision(row) for row in rows]

    def add_reservations(
        self, request_id: str, reservations: Sequence[Reservation], tx: Transaction | None = None
    ) -> bool:
        """Append ``reservations`` to ``request_id``'s; ``False`` (nothing written) if it has no row."""
        with self.store.within(tx) as t:
            held = self.get(request_id, t)
            if held is None:
                return False
            t.execute(
                "UPDATE broker_decisions SET reservations = ? WHERE broker = ? AND request_id = ?",
                (_encode((*held.reservations, *reservations)), self.broker, request_id),
            )
            return True

    def set_reservations(self, request_id: str, reservations: Sequence[Reservation], tx: Transaction) -> None:
        """Make ``reservations`` ``request_id``'s (its reservations merged: ``GatedBroker._link``)."""
        tx.execute(
            "UPDATE broker_decisions SET reservations = ? WHERE broker = ? AND request_id = ?",
            (_encode(reservations), self.broker, request_id),
        )

    def remove(self, request_id: str, tx: Transaction | None = None) -> None:
        """Forget ``request_id``'s decision (its lease ended); nothing happens if it has none."""
        with self.store.within(tx) as t:
            t.execute(
                "DELETE FROM broker_decisions WHERE broker = ? AND request_id = ?", (self.broker, request_id)
            )


def _encode(reservations: Sequence[Reservation]) -> str:
    return json.dumps([list(r) for r in reservations])


def decoded_decision(row: Row) -> LeaseDecision:
    """A ``broker_decisions`` row (``DECISION_COLUMNS``) as the decision it records;
    ``MalformedRow`` (a ``StoreError``) naming the table, the request and the column when one is
    not what agentgate writes (a row written outside it): ``audit_index`` and ``cost_per_gpu_hour``
    a whole number >= 0 or null, ``reservations`` a JSON list of ``[reservation id, unit,
    amount]``, the amount a whole number from 0 to ``MAX_STORED_INTEGER``. Every read of the
    table goes through it (the broker's, ``agentgate broker leases``, ``budget held`` and
    ``budget settle``). Until review R82 the two numbers were read with ``int`` outside the
    check, and an amount with ``int``: text was a ``ValueError`` traceback, an amount of ``1e400``
    an ``OverflowError`` one, and an amount of ``5.7`` was read as 5."""
    request_id, principal, chain_hash, resource, audit_index, price, reservations = row
    for name, value in (("audit_index", audit_index), ("cost_per_gpu_hour", price)):
        if value is not None and not _whole(value):
            raise _malformed(request_id, f"its {name} is {value!r:.60}, not a whole number >= 0 or null")
    try:
        held = json.loads(str(reservations))
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        held = None
    if not isinstance(held, list) or not all(_reservation(r) for r in held):
        raise _malformed(
            request_id,
            f"its reservations are {reservations!r:.60}, not a JSON list of [reservation id, unit, amount]",
        )
    return LeaseDecision(
        str(request_id),
        str(principal),
        str(chain_hash),
        str(resource),
        audit_index,
        price,
        tuple((r, u, a) for r, u, a in held),
    )


def _reservation(value: object) -> bool:
    """Whether ``value`` is a stored ``[reservation id, unit, amount]``."""
    return (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], str)
        and bool(value[0])
        and isinstance(value[1], str)
        and _whole(value[2])
    )


def _whole(value: object) -> bool:
    """Whether ``value`` is an ``int`` (a bool is not one) from 0 to ``MAX_STORED_INTEGER``."""
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= MAX_STORED_INTEGER


def _malformed(request_id: object, what: str) -> MalformedRow:
    """The error for a malformed row of ``broker_decisions``, naming the request (quoted cut)."""
    return MalformedRow(f"broker_decisions: the row of request {request_id!r:.80} is malformed: {what}")
