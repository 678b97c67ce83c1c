"""Budget reservations left held: listed and settled by hand.

A worker killed between a decision and its outcome (SIGKILL, the OOM killer, a lost host) leaves
its ``allow`` entry and its budget reservation committed, and nothing after them: nothing
releases the reservation on its own (that is what keeps a budget from being overspent), so the
grant's budget stays that much smaller for as long as it lives. A once-only call's reservation
is settled with the call (``agentgate.store.once.settle``) and a GPU lease's by its broker when
the lease ends; this module does the same for the others (an idempotent tool's, a model call's),
through ``agentgate budget held`` and ``agentgate budget settle``.

``held`` lists the reservations still ``reserved`` that were made at least a given age ago (by
default ``once.SETTLE_MIN_AGE_S``, the age ``tasks settle`` waits for), each with the ``allow``
entry that made it where the log shows it, and the once-only call or the GPU lease that holds
it, if one does: those are settled with their call (``agentgate tasks settle``) or when their
lease ends (``GatedBroker``), never here.
``settle_held`` charges one (it ran) or releases it (it did not), in one transaction with an
``outcome`` entry as ``once.settle`` writes one, whose ``charges`` name the unit the reservation
stores (``budget_reservations.unit``, since review R61; a row made before has none and its outcome
no ``charges``). The reservation's state changes by the ledger's
conditional update from ``reserved``, so one settled meanwhile by its own process (which was
slow, not dead) is refused, never settled twice.

A reservation records the index of its ``allow`` entry (``budget_reservations.entry``: the log's
next index when it was made, in the decision's transaction, which holds the log's lock, so the
``allow`` appended after it takes it), checked when read: an ``allow`` whose grant is the
reservation's nearest the tip and whose ``budget_delta`` is its amount. A reservation that is not
the first of its call (a model call's second unit), or whose caller's own grant has no budget,
has none found. Until review R61 the entry was searched for by time, which is not monotonic
across a clock step back: a reservation could be given another call's ``allow``. Reservations
made before (no ``entry``) are still searched for by time: the first ``allow`` appended at or
after the reservation's time, within 5 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry, format_time
from agentgate.errors import AgentGateError, InputError, MalformedRow, SettlementRefused, StoreError
from agentgate.store._base import Store, Transaction, tables_held
from agentgate.store.audit import AuditLog
from agentgate.store.broker_decisions import DECISION_COLUMNS, decoded_decision
from agentgate.store.ledger import (
    BudgetLedger,
    has_entry_column,
    has_unit_column,
    stored_reservation,
    stored_unit,
    unsettleable,
)
from agentgate.store.once import ONCE_COLUMNS, SETTLE_MIN_AGE_S, once_record, seconds_shown

_ID = re.compile(r"[0-9a-f]{32}\Z", re.ASCII)
"""A reservation id as ``ledger._reservation_id`` makes them."""

_FIND_WITHIN_S = 5.0
"""How long after a reservation its ``allow`` entry is looked for: both are written in one
transaction, microseconds apart on one host; the rest allows for a slow commit."""

_FIND_AT_MOST = 1000
"""How many entries from the reservation's time on are read to find its ``allow`` entry."""


@dataclass(frozen=True)
class HeldReservation:
    """A reservation not settled: its id, the grants it holds budget of (root first; the last is
    the caller's own), its amount in the unit of that budget, when it was made, the ``allow``
    entry that made it (``None`` where the log does not show which), and the key of the once-only
    call it belongs to (``None`` for any other call; settle such a one with ``tasks settle``)."""

    id: str
    chain: tuple[str, ...]
    amount: int
    reserved_at: str
    allow_index: int | None
    once_key: str | None
    lease: tuple[str, str] | None = None
    """The GPU lease (broker, request id) whose decision holds it until the lease ends, if one does."""
    unit: str | None = None
    """The budget unit its amount is in, as stored (``None``: a row made before review R61)."""

    @property
    def grant_id(self) -> str:
        """The grant whose budget the caller spends first (nearest the tip of its chain)."""
        return self.chain[-1]

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "grant_id": self.grant_id,
            "chain": list(self.chain),
            "amount": self.amount,
            "reserved_at": self.reserved_at,
            "allow_index": self.allow_index,
            "once_key": self.once_key,
            "lease": None if self.lease is None else {"broker": self.lease[0], "request_id": self.lease[1]},
            "unit": self.unit,
        }


def held(
    store: Store, audit: AuditLog | None, *, min_age_s: float = SETTLE_MIN_AGE_S
) -> list[HeldReservation]:
    """The reservations still held that were made at least ``min_age_s`` seconds ago, oldest
    first (``held_rows``); ``MalformedRow`` for the first row that cannot be read, naming it and
    what to repair it from."""
    found, unreadable = held_rows(store, audit, min_age_s=min_age_s)
    if unreadable:
        raise unreadable[0]
    return found


def held_rows(
    store: Store, audit: AuditLog | None, *, min_age_s: float = SETTLE_MIN_AGE_S
) -> tuple[list[HeldReservation], list[MalformedRow]]:
    """The reservations still held that were made at least ``min_age_s`` seconds ago, oldest
    first, and for each row among them that cannot be read (its chain or amount edited outside
    agentgate) a ``MalformedRow`` naming it and what to repair it from (``ledger.unsettleable``),
    in the same order: one such row hides none of the others (until review R69 ``agentgate budget
    held`` listed nothing until it was repaired). Reads only: the ledger's, the once-only calls'
    and the lease decisions' tables are not made when missing (no reservation then, or none of a
    once-only call or a lease). ``audit``: the log to find each one's ``allow`` entry in
    (``None``: not looked for). An age of 0 lists every one, also those stamped later than this
    host's clock says (``_cut``). ``InputError`` for an age that is not a number >= 0;
    ``StoreError`` for a once-only call's or a lease's row that cannot be read (it may hold any
    of them: none is listed)."""
    cut = _cut(min_age_s)
    there = _tables(store, ("budget_reservations", "agentgate_once", "broker_decisions"))
    if "budget_reservations" not in there:
        return [], []
    aged = "" if cut is None else " AND created <= ?"
    rows = store.query(
        f"SELECT id, chain, amount, created, {_ENTRY[has_entry_column(store)]}, {_UNIT[has_unit_column(store)]} "
        f"FROM budget_reservations WHERE state = 'reserved'{aged} ORDER BY created, id",
        () if cut is None else (cut,),
    )
    holders = _once_holders(store, None) if "agentgate_once" in there else {}
    leases = _lease_holders(store, None) if "broker_decisions" in there else {}
    size = audit.size() if audit is not None and rows else 0  # a count of the whole log: once
    found = []
    unreadable = []
    for id_, chain_text, amount_text, created, entry, unit in rows:
        try:
            chain, amount = stored_reservation(id_, chain_text, amount_text)
        except MalformedRow as exc:
            unreadable.append(unsettleable(exc, _recorded_allow(audit, entry, size)))
            continue
        found.append(
            HeldReservation(
                str(id_),
                chain,
                amount,
                str(created),
                _allow_index(audit, chain, amount, str(created), size, entry),
                holders.get(str(id_)),
                leases.get(str(id_)),
                stored_unit(unit),
            )
        )
    return found, unreadable


def settle_held(
    store: Store,
    audit: AuditLog,
    reservation: str,
    *,
    ran: bool,
    by: str,
    reason: str = "",
    min_age_s: float = SETTLE_MIN_AGE_S,
    committed: Callable[[], None] | None = None,
) -> tuple[HeldReservation, int]:
    """Settle by hand a reservation left held; the reservation as it was and the index of the
    ``outcome`` entry that records it.

    In one transaction: ``ran`` charges it as reserved (its call had its effect), else it is
    released whole, and an ``outcome`` entry (status ``ok`` or ``not_run``, ``budget_delta`` the
    amount charged) names ``by``, ``reason`` and the reservation, referring to its ``allow``
    entry where the log shows it. Raises ``InputError`` for an id that is not one
    (32 hex digits), a ``by`` that is empty or not text, an age that is not a number >= 0, and ``SettlementRefused`` for a
    reservation that does not exist, is settled already (also by its own process meanwhile),
    belongs to a once-only call (``agentgate tasks settle`` settles the call with it) or to a GPU
    lease (its broker settles it when the lease ends) or was
    made less than ``min_age_s`` seconds ago (its call may still be running; an age of 0 bounds
    nothing, ``_cut``). Each refusal quotes the value as ``quoted`` does, cut at 60 characters
    (until review R88 a reservation or ``by`` nested past the recursion limit was a bare
    ``RecursionError``). ``committed``, where given, is called last inside the transaction, as
    it commits (``agentgate budget settle`` holds a signal from there until its line is said).
    """
    if not isinstance(reservation, str) or not _ID.match(reservation):
        raise InputError(
            f"a reservation id is 32 lower-case hexadecimal digits, got {quoted(reservation, 60)}"
        )
    if not isinstance(by, str) or not by.strip():
        raise InputError(f"say who settles the reservation (by, as text), got {quoted(by, 60)}")
    cut = _cut(min_age_s)
    there = _tables(store, ("budget_reservations", "agentgate_once", "broker_decisions"))
    if "budget_reservations" not in there:
        # Read before the ledger is opened: opening it makes its tables (review R83: settling in
        # a store where no call was ever allowed left two empty ledger tables there).
        raise SettlementRefused(
            f"no budget reservation has the id {reservation}: the store holds no budget ledger"
        )
    ledger = BudgetLedger(store)
    rows = store.query(
        f"SELECT chain, amount, state, created, {_ENTRY[has_entry_column(store)]}, "
        f"{_UNIT[has_unit_column(store)]} FROM budget_reservations WHERE id = ?",
        (reservation,),
    )
    if not rows:
        raise SettlementRefused(f"no budget reservation has the id {reservation}")
    chain_text, amount_text, state_text, created_text, entry, unit = rows[0]
    try:
        chain, amount = stored_reservation(reservation, chain_text, amount_text)
    except MalformedRow as exc:
        raise unsettleable(exc, _recorded_allow(audit, entry, audit.size())) from None
    state, created = str(state_text), str(created_text)
    if state != "reserved":
        raise SettlementRefused(f"reservation {reservation} is {state}, not held: there is nothing to settle")
    allow_index = _allow_index(audit, chain, amount, created, audit.size(), entry)
    found = HeldReservation(reservation, chain, amount, created, allow_index, None, unit=stored_unit(unit))
    allowed = audit.entry(found.allow_index) if found.allow_index is not None else None
    with store.transaction() as tx:
        audit.lock(tx)  # before any row: the lock order of every Gate write (PostgreSQL)
        once_key = _once_holders(store, tx).get(reservation) if "agentgate_once" in there else None
        if once_key is not None:
            raise SettlementRefused(
                f"reservation {reservation} is held for the call {once_key} of a tool that must run "
                f"once: settle the call with agentgate tasks settle {once_key} --ran|--not-run"
            )
        lease = _lease_holders(store, tx).get(reservation) if "broker_decisions" in there else None
        if lease is not None:
            raise SettlementRefused(
                f"reservation {reservation} is held for GPU lease {lease[1]} of broker {lease[0]}, whose "
                f"broker settles it when the lease ends (agentgate broker leases --broker {lease[0]})"
            )
        if cut is not None and created > cut:
            raise SettlementRefused(
                f"reservation {reservation} was made at {created} and its call may still be running: "
                f"settle it once it cannot be, {seconds_shown(min_age_s)} after it was made (--older-than SECONDS)"
            )
        try:
            # The ledger's conditional update from ``reserved`` decides: a reservation its own
            # process settled since it was read above changes nothing here, and is refused.
            charged = ledger.charge(reservation, amount, tx, exhaust=True) if ran else {}
            if not ran:
                ledger.release(reservation, tx)
        except InputError:
            raise SettlementRefused(
                f"reservation {reservation} was settled meanwhile (its call's process was not dead): "
                "nothing was changed"
            ) from None
        tail = f" ({reason})" if reason else ""
        said = "it ran" if ran else "it did not run"
        index = audit.append(
            {
                "kind": "outcome",
                "principal": allowed.principal if allowed else "unknown",
                "chain_hash": allowed.chain_hash if allowed else found.grant_id,
                "policy_hash": allowed.policy_hash if allowed else None,
                "resource": allowed.resource if allowed else None,
                "args_digest": allowed.args_digest if allowed else None,
                "args": allowed.args if allowed else {},
                "status": "ok" if ran else "not_run",
                "ref": found.allow_index,
                "budget_delta": amount if ran else 0,
                "reasons": [f"settled by hand by {by}: {said}{tail}; budget reservation {reservation}"],
                "charges": _charges(charged, found.unit),
            },
            tx,
        )
        if committed is not None:
            committed()  # the transaction commits as it ends
    return found, index


def _cut(min_age_s: float) -> str | None:
    """The latest reservation time that is at least ``min_age_s`` seconds old, as stored; ``None``
    for an age of 0, which bounds nothing: a reservation stamped later than this host's clock
    says (by a host whose clock ran ahead, or before this clock was stepped back) is as old as
    any. Until review R60 such a one was neither listed nor settled, even at an age of 0, until
    the clock here passed its stamp."""
    if isinstance(min_age_s, bool) or not isinstance(min_age_s, int | float) or not min_age_s >= 0:
        raise InputError(f"the minimum age must be a number of seconds >= 0, got {quoted(min_age_s, 60)}")
    if min_age_s == 0:
        return None
    try:
        return format_time(datetime.now(UTC) - timedelta(seconds=min_age_s))
    except OverflowError:  # older than the calendar: no reservation is that old
        return "0000"


def holds_ledger(store: Store) -> bool:
    """Whether ``store`` holds the budget ledger's reservations, read without creating them
    (``settle_held`` refuses where it does not, and ``agentgate budget settle`` then makes no log)."""
    return "budget_reservations" in _tables(store, ("budget_reservations",))


def _tables(store: Store, names: Sequence[str]) -> set[str]:
    """Which of the tables ``names`` the store holds, read without creating any (the listing
    opens the store to read only, and a store where no call was ever allowed has none)."""
    return tables_held(store.query, store.dialect, names)


def _once_holders(store: Store, tx: Transaction | None) -> dict[str, str]:
    """The reservations that once-only calls hold, each with its call's key. Only a call still
    ``started`` holds any: its outcome settles them in the transaction that marks it (the table
    keeps a row per call for good; the others are not read).

    Every such row is read as JSON (``once.once_record``), not searched for an id's text: until
    review R64 a row whose ``reservations`` named the id in another spelling (a JSON escape) or
    was edited into no JSON (an id's quotes dropped) did not match, and ``budget settle`` settled
    the reservation alone, leaving its call ``started``. Raises ``StoreError`` naming the row
    when one is malformed: whether it holds a reservation cannot be told, and none is settled
    on a guess (settle the call, or repair the row, first)."""
    sql = f"SELECT {ONCE_COLUMNS} FROM agentgate_once WHERE state = 'started' ORDER BY key"
    rows = tx.execute(sql) if tx is not None else store.query(sql)
    holders: dict[str, str] = {}
    for row in rows:
        try:
            record = once_record(row)
        except StoreError as exc:
            raise StoreError(f"{exc}; {_UNREADABLE_HOLDER}") from None
        for reservation in record.reservations:
            holders.setdefault(reservation, record.key)
    return holders


def _lease_holders(store: Store, tx: Transaction | None) -> dict[str, tuple[str, str]]:
    """The reservations that GPU leases hold, each with its lease (broker, request id): the
    recorded decision of a lease taken through ``GatedBroker`` holds them until the lease ends,
    hours maybe. Every row is read as its broker reads it (``broker_decisions.decoded_decision``), not
    searched for an id's text (until review R64: a row spelling the id otherwise, or edited into
    no JSON, did not match, and ``budget settle`` settled the reservation alone, which the
    broker's own settlement then failed on). Raises ``StoreError`` naming the row when one is
    malformed: none is settled on a guess."""
    sql = f"SELECT broker, {DECISION_COLUMNS} FROM broker_decisions ORDER BY broker, request_id"
    rows = tx.execute(sql) if tx is not None else store.query(sql)
    holders: dict[str, tuple[str, str]] = {}
    for broker, *decided in rows:
        try:
            decision = decoded_decision(tuple(decided))
        except StoreError as exc:
            raise StoreError(f"{exc}; {_UNREADABLE_HOLDER}") from None
        for reservation, _, _ in decision.reservations:
            holders.setdefault(reservation, (str(broker), decision.request_id))
    return holders


_UNREADABLE_HOLDER = (
    "a row that cannot be read may hold any budget reservation, so none is listed or settled by "
    "hand until it is repaired"
)


_ENTRY = {True: "entry", False: "NULL"}
"""What a reservation row's ``entry`` is read as: the column, or null in a store made before it."""

_UNIT = {True: "unit", False: "NULL"}
"""What a reservation row's ``unit`` is read as: the column, or null in a store made before it."""


def _charges(charged: dict[str, int], unit: str | None) -> dict[str, dict[str, int]] | None:
    """An outcome's ``charges`` (docs/audit-format.md): what each grant was charged (``charged``)
    in the reservation's ``unit``; ``None`` (not written) when nothing was charged or the row
    records no unit: the outcome is then as before, its ``budget_delta`` charged to every budget."""
    if not charged or unit is None:
        return None
    return {grant_id: {unit: n} for grant_id, n in charged.items()}


def _allow_index(
    audit: AuditLog | None, chain: Sequence[str], amount: int, created: str, size: int, entry: object = None
) -> int | None:
    """The ``allow`` entry that made the reservation (module docstring) in the first ``size``
    entries of ``audit``, or ``None``: the one at ``entry`` (as recorded) when it is the
    reservation's, else none; searched for by time only for a reservation that recorded none."""
    if audit is None or not chain:
        return None
    if entry is not None:
        if isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < size:
            return None
        try:
            made = audit.entry(entry)
        except AgentGateError:  # an entry edited (verify says so)
            return None
        mine = made.kind == "allow" and made.chain_hash == chain[-1] and made.budget_delta == amount
        return entry if mine else None
    try:
        first = _first_at_or_after(audit, created, size)
        if first is None:
            return None
        until = format_time(datetime.fromisoformat(created) + timedelta(seconds=_FIND_WITHIN_S))
        for entry in audit.entries(first, skip_malformed=True):
            if entry.time > until or entry.index >= first + _FIND_AT_MOST:
                return None
            if entry.kind == "allow" and entry.chain_hash == chain[-1] and entry.budget_delta == amount:
                return entry.index
    except (AgentGateError, ValueError):  # a log edited (verify says so) or a time not in format
        return None
    return None


def _recorded_allow(audit: AuditLog | None, entry: object, size: int) -> AuditEntry | None:
    """The ``allow`` entry a malformed reservation row names (``entry``, as stored), to repair
    the row from (``ledger.unsettleable``); ``None`` where it names none the log shows."""
    if audit is None or isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < size:
        return None
    try:
        made = audit.entry(entry)
    except AgentGateError:  # an entry edited (verify says so)
        return None
    return made if made.kind == "allow" else None


def _first_at_or_after(audit: AuditLog, when: str, size: int) -> int | None:
    """The first index below ``size`` whose entry's time is ``when`` or later (entries are
    appended under the log's lock, each stamped then: their times grow with their index on one
    clock)."""
    low, high = 0, size
    while low < high:
        middle = (low + high) // 2
        if audit.entry(middle).time < when:
            low = middle + 1
        else:
            high = middle
    return low if low < size else None


__all__ = ["HeldReservation", "held", "held_rows", "settle_held"]
