"""Once-only tool calls: what became of each run of a non-idempotent tool call, durably.

A framework that resumes a run from its checkpoint (LangGraph after a crash or a restart) runs
again every node whose result it had not saved, and with it every tool call that node makes, under
the same run, task and tool call id. For a tool that is not idempotent (a payment, an e-mail) that
second run is a second effect. The Gate therefore keeps one row per such call, keyed by
``agentgate.tasks.idempotency_key`` of its tenant, the agent's DID, its run (else its grant), tool,
call id and argument digest, with no grant (a restarted process hands out fresh grants): not the
scheduler's key, which a dead letter names. The row is written in the transaction that records the
call's ``allow`` (``started``) and updated in the one that records its outcome (``ok``, ``error``,
``paused``, or ``not_run`` when the scheduler refused it before it could start). A later decision
on the same key finds the row and refuses, unless the call paused (LangGraph's ``interrupt()``
inside the tool: it is meant to run again) or never started (docs/tasks.md).

The row outlives the process, so the refusal holds after a restart; a call whose process died
while it ran stays ``started``: it may have had its effect, and nothing runs it again on its own.
A person who has looked settles it (``settle``, ``agentgate tasks settle KEY --ran|--not-run``):
it ran (never again, its reservation charged) or it did not (it may run again, its reservation
released), with an ``outcome`` entry in the audit log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from agentgate._names import SETTLE_MIN_AGE_S as SETTLE_MIN_AGE_S  # read here by store.held and tests
from agentgate._names import _unicode
from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry
from agentgate.errors import BeyondLogEnd, InputError, MalformedRow, SettlementRefused
from agentgate.store._base import Dialect, Store, Transaction, tables_held
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import (
    BudgetLedger,
    _by_id,
    has_unit_column,
    may_be_stored,
    stored_reservation,
    stored_unit,
    unsettleable,
)

ONCE_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_once (
    key TEXT PRIMARY KEY,
    allow_index INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'ok', 'error', 'paused', 'not_run')),
    reservations TEXT NOT NULL DEFAULT '[]'
);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_once (
    key TEXT PRIMARY KEY,
    allow_index BIGINT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'ok', 'error', 'paused', 'not_run')),
    reservations TEXT NOT NULL DEFAULT '[]'
);
""",
}

OnceState = Literal["started", "ok", "error", "paused", "not_run"]

RUN_AGAIN: frozenset[str] = frozenset({"paused", "not_run"})
"""States after which the same call may be decided and run again."""

UNSETTLED: tuple[OnceState, ...] = ("started", "error")
"""States a person may settle: outcome never recorded, or ran and failed (it may have had its effect)."""


@dataclass(frozen=True)
class OnceRecord:
    """One call that must run once: its key, the ``allow`` entry that let it run, its state, and
    the budget reservations that allow took (held until its outcome)."""

    key: str
    allow_index: int
    state: OnceState
    reservations: tuple[str, ...]


class OnceCalls:
    """The runs of non-idempotent tool calls, shared by every process that uses the same store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("once", ONCE_DDL)

    def last(self, tx: Transaction, key: str) -> tuple[OnceState, int] | None:
        """The state of the call ``key`` and the index of its latest ``allow`` entry, or ``None``
        if it never ran. Read in ``tx``, which holds the audit append lock (every Gate write
        takes it first), so two deciders of the same call cannot both find nothing. ``StoreError``
        for a row that is malformed (``once_record``; until review R63 an ``allow_index`` of text was a
        ``ValueError`` out of the decision)."""
        rows = tx.execute(f"SELECT {ONCE_COLUMNS} FROM agentgate_once WHERE key = ?", (key,))
        if not rows:
            return None
        record = once_record(rows[0])
        return record.state, record.allow_index

    def start(self, tx: Transaction, key: str, allow_index: int, reservations: Sequence[str] = ()) -> None:
        """Record in ``tx`` that the call ``key`` was allowed by entry ``allow_index`` and may run,
        holding ``reservations``."""
        tx.execute(
            "INSERT INTO agentgate_once (key, allow_index, state, reservations) VALUES (?, ?, 'started', ?) "
            "ON CONFLICT (key) DO UPDATE SET allow_index = excluded.allow_index, state = 'started', "
            "reservations = excluded.reservations",
            (key, allow_index, json.dumps(list(reservations))),
        )

    def finish(self, tx: Transaction, key: str, state: OnceState, allow_index: int | None = None) -> None:
        """Record in ``tx`` what became of the call ``key`` allowed by entry ``allow_index``
        (``ok``, ``error``, ``paused``, ``not_run``; ``None``: by its latest allow, whichever
        that is). The call's own word stands over a hand's
        ``not_run`` (it did run: never allowed again), a hand's ``ok`` over the call's (it ran:
        an ``error`` confirms it, and a settled call is not listed as unsettled again), and a
        later allow's row over an earlier allow's outcome (the call was decided again after it
        was settled as not run; the row is the later run's). Until review R68 every outcome set
        the state: a call settled ``--ran`` that then failed was listed by ``tasks unsettled``
        again, and an earlier run's outcome could mark a later run, still running, ``ok``."""
        if allow_index is None:
            tx.execute("UPDATE agentgate_once SET state = ? WHERE key = ? AND state <> 'ok'", (state, key))
            return
        tx.execute(
            "UPDATE agentgate_once SET state = ? WHERE key = ? AND allow_index = ? AND state <> 'ok'",
            (state, key, allow_index),
        )

    def unsettled(self) -> list[OnceRecord]:
        """The calls a person may have to look at (``UNSETTLED``), oldest allow first;
        ``MalformedRow`` for the first row that is not one (``unsettled_rows``)."""
        found, unreadable = self.unsettled_rows()
        if unreadable:
            raise unreadable[0]
        return found

    def unsettled_rows(self) -> tuple[list[OnceRecord], list[MalformedRow]]:
        """The calls a person may have to look at (``UNSETTLED``), oldest allow first, and for
        each row among them that is not one (``once_record``: written outside agentgate) the
        ``MalformedRow`` naming it, in the same order: one such row hides none of the others
        (until review R69 ``agentgate tasks unsettled`` listed nothing until it was repaired)."""
        marks = ", ".join("?" for _ in UNSETTLED)
        rows = self.store.query(
            f"SELECT {ONCE_COLUMNS} FROM agentgate_once WHERE state IN ({marks}) ORDER BY allow_index",
            UNSETTLED,
        )
        found: list[OnceRecord] = []
        unreadable: list[MalformedRow] = []
        for row in rows:
            try:
                found.append(once_record(row))
            except MalformedRow as exc:
                unreadable.append(exc)
        return found, unreadable


ONCE_COLUMNS = "key, allow_index, state, reservations"
"""The columns ``once_record`` reads, in its order."""


def once_record(row: Sequence[object]) -> OnceRecord:
    """A row of ``agentgate_once`` (``ONCE_COLUMNS``) as a record; ``StoreError`` naming the table,
    the call and the column when it is not one (a row written outside agentgate), never a
    traceback, never a value read as something it is not. Until review R63 ``reservations`` was
    taken for a JSON list whatever it held: text that is no JSON was a traceback out of ``tasks
    unsettled`` and ``tasks settle``, and a JSON string (object) was walked character by
    character (key by key), so that ``settle`` settled the call and left its reservation held."""
    key, index, state, reservations = row
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise _malformed(key, f"its allow_index is {index!r:.60}, not an index of the audit log")
    try:
        ids = json.loads(str(reservations))
    except (ValueError, RecursionError):
        ids = None
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise _malformed(
            key, f"its reservations are {reservations!r:.60}, not a JSON list of reservation ids"
        )
    return OnceRecord(str(key), index, cast(OnceState, state), tuple(ids))


def _malformed(key: object, what: str) -> MalformedRow:
    """The error for a malformed row of ``agentgate_once``: its key quoted cut at 80 characters
    (a key agentgate makes, 64 hexadecimal digits, is whole: ``tasks settle`` takes it) and its
    value at 60, as ``ledger.stored_reservation`` quotes a reservation's (an edited row may hold 100,000)."""
    return MalformedRow(f"agentgate_once: the row of call {key!r:.80} is malformed: {what}")


def seconds_shown(min_age_s: float) -> str:
    """A minimum age of seconds as a settle refusal writes it: whole seconds (``900 s``,
    ``inf s``); an integer past 128 bits, which passes ``>= 0`` but no float holds, as the power
    of two it is at least (``at least 2**1328 s``). Until review R88's third regression pass such
    an age (``10**400``) was written with ``:.0f``, a bare ``OverflowError`` out of the refusal."""
    if isinstance(min_age_s, int) and min_age_s.bit_length() > 128:
        return f"at least 2**{min_age_s.bit_length() - 1} s"
    return f"{min_age_s:.0f} s"


def settle(
    store: Store,
    audit: AuditLog,
    key: str,
    *,
    ran: bool,
    by: str,
    reason: str = "",
    min_age_s: float = SETTLE_MIN_AGE_S,
    committed: Callable[[], None] | None = None,
) -> OnceRecord:
    """Settle by hand a call that must run once and is ``UNSETTLED``; the record as it was.

    In one transaction: ``ran`` marks it ``ok`` (never run again; a reservation its lost outcome
    left held is charged as reserved), else ``not_run`` (it may be decided and run again; such a
    reservation is released), and an ``outcome`` entry (status ``ok`` or ``not_run``) refers to
    its ``allow`` entry, naming ``by`` and ``reason``. Its ``budget_delta`` is what was charged
    in the unit of the caller's own budget (its first reservation's, as the Gate's outcome; the
    sum where several reservations are in it, as a GPU lease's), 0 when that reservation is no
    longer held, and its ``charges`` what each grant was charged by unit, summed; until review
    R67 ``budget_delta`` was the first reservation still held, whatever its unit, and a unit
    charged twice took the last amount in ``charges``. A reservation whose row records no unit
    a budget can be in (``ledger.stored_unit``) is charged but named in no ``charges``, as
    ``budget settle`` does: until review R89 an edited unit (``"calls\\n..."``) went into the
    signed log as a unit charged. Raises ``InputError`` for a ``key`` that is
    not text, a ``by`` that is empty or not text, or a ``min_age_s`` that is not a number >= 0
    (until review R60 a ``by`` of ``None`` raised ``AttributeError``, a ``min_age_s`` of ``"900"``
    ``TypeError``), and ``SettlementRefused`` (an ``InputError``) for an unknown key (one holding
    a NUL too, on both stores: ``ledger.may_be_stored``),
    a call that is not unsettled, and a ``started`` call allowed less than ``min_age_s`` ago (it
    may still be running). A ``min_age_s`` of 0 bounds nothing: a call whose ``allow`` is stamped
    later than this host's clock says (by a host whose clock ran ahead, or before this clock was
    stepped back) is settled too; until review R60 it was refused until the clock here passed it.
    Each refusal quotes the value as ``quoted`` does, cut at 60 characters (until review R88 a
    1 MB key was written whole into ``SettlementRefused``, and a key nested past the recursion
    limit was a bare ``RecursionError``), the key of a call found too (until review R88's third
    regression pass a stored 1 MB key, or one holding a line break, was written as it is).
    ``committed``, where given, is called last inside the transaction, as it commits
    (``agentgate tasks settle`` holds a signal from there until its line is said).
    """
    if not isinstance(key, str):
        raise InputError(f"the key of a call that must run once is text, got {quoted(key, 60)}")
    if not isinstance(by, str) or not by.strip():
        raise InputError(f"say who settles the call (by, as text), got {quoted(by, 60)}")
    if isinstance(min_age_s, bool) or not isinstance(min_age_s, int | float) or not min_age_s >= 0:
        raise InputError(f"the minimum age must be a number of seconds >= 0, got {quoted(min_age_s, 60)}")
    if not _unicode(key):  # ``$'\xff'``: before the store is looked at, as the driver refused it
        raise InputError(f"the key {quoted(key, 60)} is not UTF-8 text: no call that must run once has it")
    if not holds_once_calls(store):
        # Read before the ledger and the once-only calls are opened: opening them makes their
        # tables (review R83: a refused settle left them in a store where no call was allowed).
        raise SettlementRefused(
            f"no call that must run once has the key {quoted(key, 60)}: the store holds no calls that must run once"
        )
    ledger, calls = BudgetLedger(store), OnceCalls(store)
    unit_column = "unit" if has_unit_column(store) else "NULL"  # a row's unit: charges (review R61)
    with store.transaction() as tx:
        audit.lock(tx)  # before any row: the lock order of every Gate write (PostgreSQL)
        # A key with a NUL, which no key agentgate makes (hexadecimal) holds, is not found on both
        # stores: until review R89b PostgreSQL refused it with a StoreError, as it did a NUL in a
        # reservation id (``may_be_stored``).
        rows = (
            tx.execute(f"SELECT {ONCE_COLUMNS} FROM agentgate_once WHERE key = ?", (key,))
            if may_be_stored(key)
            else []
        )
        if not rows:
            raise SettlementRefused(f"no call that must run once has the key {quoted(key, 60)}")
        record = once_record(rows[0])
        if record.state not in UNSETTLED:
            raise SettlementRefused(
                f"call {quoted(key, 60)} is {record.state}, not unsettled: there is nothing to settle"
            )
        allowed = _allow_entry(audit, record, tx)
        if record.state == "started" and min_age_s > 0:  # 0: any age, also one stamped ahead
            age = time.time() - datetime.fromisoformat(allowed.time).timestamp()
            if age < min_age_s:
                raise SettlementRefused(
                    f"call {quoted(key, 60)} was allowed {max(age, 0):.0f} s ago and may still be running: settle it "
                    f"once it cannot be, {seconds_shown(min_age_s)} after it was allowed (--older-than SECONDS)"
                )
        tail = f" ({reason})" if reason else ""
        charged = 0
        charges: dict[str, dict[str, int]] = {}
        own: str | None = None  # the unit of the caller's own budget: the first reservation's
        if record.state == "started":  # its outcome was never written: its reservations are held
            for position, reservation in enumerate(record.reservations):
                # An id no reservation may have (a NUL, a lone surrogate) is one not found, on both
                # stores, as the ledger answers it: until review R89 PostgreSQL refused the
                # settlement for a NUL instead, and until R89b both stores for a surrogate.
                rows = _by_id(
                    tx.execute,
                    f"SELECT chain, amount, {unit_column}, state FROM budget_reservations WHERE id = ?",
                    (reservation,),
                    reservation,
                )
                # None: a row made before review R61, or one whose unit no budget is in (edited
                # outside agentgate), settled without charges as ``budget settle`` settles it.
                unit = stored_unit(rows[0][2]) if rows else None
                if position == 0:
                    own = unit
                if not rows or rows[0][3] != "reserved":
                    continue
                try:
                    _, amount = stored_reservation(reservation, rows[0][0], rows[0][1])
                except MalformedRow as exc:  # the allow's amount is the first reservation's
                    raise unsettleable(exc, allowed if position == 0 else None) from None
                if ran:
                    by_grant = ledger.charge(reservation, amount, tx, exhaust=True)
                    if position == 0 or (unit is not None and unit == own):
                        charged += amount
                    if unit is not None:
                        for grant_id, n in by_grant.items():
                            by_unit = charges.setdefault(grant_id, {})
                            by_unit[unit] = by_unit.get(unit, 0) + n
                else:
                    ledger.release(reservation, tx)
        calls.finish(tx, key, "ok" if ran else "not_run", record.allow_index)
        audit.append(
            {
                "kind": "outcome",
                "principal": allowed.principal,
                "chain_hash": allowed.chain_hash,
                "policy_hash": allowed.policy_hash,
                "resource": allowed.resource,
                "args_digest": allowed.args_digest,
                "args": allowed.args,
                "status": "ok" if ran else "not_run",
                "ref": record.allow_index,
                "budget_delta": charged,
                "reasons": [f"settled by hand by {by}: {'it ran' if ran else 'it did not run'}{tail}"],
                "charges": charges or None,
            },
            tx,
        )
        if committed is not None:
            committed()  # the transaction commits as it ends
    return record


def holds_once_calls(store: Store) -> bool:
    """Whether ``store`` holds the table of calls that must run once, read without creating it
    (``settle`` refuses where it does not, and ``agentgate tasks settle`` then makes no log)."""
    return bool(tables_held(store.query, store.dialect, ("agentgate_once",)))


def _allow_entry(audit: AuditLog, record: OnceRecord, tx: Transaction) -> AuditEntry:
    """The ``allow`` entry that let ``record``'s call run; ``StoreError`` naming the row when its
    ``allow_index`` is past the end of the log or names an entry that is no ``allow`` of a tool
    call (the only calls the Gate records as once-only; a row edited outside agentgate). Until
    review R63 any entry was taken: an ``allow_index`` edited to 0 (a grant's issue) was settled
    as "allowed by audit entry 0", its outcome naming that entry's principal and resource. An
    entry whose bytes were edited raises the log's ``TamperDetected``, canonical bytes that do not
    match its leaf hash included (until review R83 their fields were copied into the outcome). Another tool call's
    ``allow`` is not told apart: the entry does not hold the run and call id the key is made of.
    Read in ``tx``, which holds the audit append lock: until the session after review R94 it was
    read on a second pooled connection, which kept the lock (and every Gate's decisions) waiting
    on whatever that read waited for, and explained a missing row from another snapshot."""
    try:
        allowed = audit.entry(record.allow_index, tx)
    except BeyondLogEnd:
        raise beyond_log_end(record) from None
    return checked_allow(record, allowed)


def beyond_log_end(record: OnceRecord) -> MalformedRow:
    """The error for ``record``, whose ``allow_index`` is past the end of the audit log."""
    return _malformed(record.key, f"its allow_index {record.allow_index} is past the end of the audit log")


def checked_allow(record: OnceRecord, allowed: AuditEntry) -> AuditEntry:
    """``allowed``, the entry at ``record``'s ``allow_index``, if it is an ``allow`` of a tool
    call; else ``StoreError`` naming the row (``_allow_entry``; ``agentgate tasks unsettled``,
    which reads the entries of many rows at once, checks each the same way)."""
    if allowed.kind != "allow" or not (allowed.resource or "").startswith("tool:"):
        raise _malformed(
            record.key,
            f"its allow_index {record.allow_index} names an audit entry that is no allow of a tool call "
            f"({allowed.kind} {allowed.resource!r:.60})",
        )
    return allowed
