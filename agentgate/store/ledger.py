"""The budget ledger: reserve, commit the actual amount, release on failure. Integer minor units.

Every grant with a budget has one ``budget_ledger`` row, created on first use with the grant's cap
as its ``remaining``. Spending at a child counts against every ancestor: a reservation decrements
each grant of the chain (root to tip) that has a cap, each with a conditional update
``UPDATE ... SET remaining = remaining - ? WHERE grant_id = ? AND remaining >= ?`` and never a
read-then-write, so two processes can never both fit into the last unit of a budget. If any grant
lacks the amount, ``BudgetExceeded`` is raised and the transaction rolls back, undoing the
decrements already made (callers must let it propagate out of the transaction). The grants of a
chain are always updated in chain order, so concurrent reservations lock rows in the same order
and cannot deadlock on PostgreSQL; SQLite serializes writers anyway.

``commit`` settles a reservation at the actual amount (refunding the difference, or charging an
overrun conditionally) and ``release`` returns it whole; both change a reservation's state with a
conditional update from ``reserved``, so a reservation is settled exactly once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeGuard

from agentgate._names import BUDGET_UNIT, BUDGET_UNIT_RULE, _unicode
from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry, format_time, utc_now
from agentgate.errors import BudgetExceeded, InputError, MalformedRow, NotHeld
from agentgate.store._base import (
    Dialect,
    Row,
    Store,
    Transaction,
    add_sqlite_columns,
    sqlite_name,
    tables_held,
    unix_time,
)

LEDGER_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS budget_ledger (
    grant_id TEXT PRIMARY KEY,
    cap INTEGER NOT NULL CHECK (cap >= 0),
    remaining INTEGER NOT NULL CHECK (remaining >= 0),
    spent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS budget_reservations (
    id TEXT PRIMARY KEY,
    chain TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
    actual INTEGER,
    created TEXT NOT NULL,
    settled TEXT,
    entry INTEGER,
    unit TEXT
) WITHOUT ROWID;
""",
    "postgresql": """
DO $$
BEGIN
    -- Created only when missing: a role without CREATE on the schema can still start agentgate.
    IF to_regclass('budget_ledger') IS NULL THEN
        CREATE TABLE budget_ledger (
            grant_id TEXT PRIMARY KEY,
            cap BIGINT NOT NULL CHECK (cap >= 0),
            remaining BIGINT NOT NULL CHECK (remaining >= 0),
            spent BIGINT NOT NULL DEFAULT 0
        );
    END IF;
    IF to_regclass('budget_reservations') IS NULL THEN
        CREATE TABLE budget_reservations (
            id TEXT PRIMARY KEY,
            chain TEXT NOT NULL,
            amount BIGINT NOT NULL CHECK (amount >= 0),
            state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
            actual BIGINT,
            created TEXT NOT NULL,
            settled TEXT,
            entry BIGINT,
            unit TEXT
        );
    END IF;
    -- A table made before review R61: its owner adds ``entry``; any other role goes on without.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('budget_reservations')
                   AND attname = 'entry' AND NOT attisdropped) THEN
        BEGIN
            ALTER TABLE budget_reservations ADD COLUMN entry BIGINT;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
    -- Likewise ``unit`` (review R61: an outcome settled by hand names its unit in ``charges``).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('budget_reservations')
                   AND attname = 'unit' AND NOT attisdropped) THEN
        BEGIN
            ALTER TABLE budget_reservations ADD COLUMN unit TEXT;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
END;
$$;
""",
}


_RESERVE = "UPDATE budget_ledger SET remaining = remaining - ? WHERE grant_id = ? AND remaining >= ?"
_SETTLE_KNOWN = (
    "UPDATE budget_reservations SET state = ?, actual = ?, settled = ? "
    "WHERE id = ? AND state = 'reserved' AND chain = ? AND amount = ?"
)


def _insert(at_entry: bool, unit: bool) -> str:
    """How a reservation is stored: with its unit (``unit``, where the store has the column) and
    the index the next audit entry takes (``at_entry``): in a decision's transaction, which holds
    the log's lock from its start, the ``allow`` that the reservation is for (the Gate appends
    nothing between them). One statement: no round trip more per decision."""
    columns, values = "id, chain, amount, state, created", "?, ?, ?, 'reserved', ?"
    if unit:
        columns, values = f"{columns}, unit", f"{values}, ?"
    if at_entry:
        columns, values = f"{columns}, entry", f"{values}, (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log)"
    return f"INSERT INTO budget_reservations ({columns}) VALUES ({values})"


_MAX_HELD = 4096
"""How many reservations a ledger remembers (chain and amount) until they are settled."""


_MATERIALIZED = "MATERIALIZED " if sqlite3.sqlite_version_info >= (3, 35) else ""
"""A hint that a common table expression is read once: SQLite 3.35 (2021) and later take it; an
older one reads the same query, maybe folded back into each budget's check (slower, not wrong)."""


_PRUNE_EXPIRED: dict[Dialect, str] = {
    # The chains agentgate writes (JSON arrays) are read element by element (json_each, which the
    # audit log's triggers need already: JSON1); any other text, only edited by hand, is searched
    # for each budget's grant id (``odd``: none at all, as a rule). The CASE keeps json_type and
    # json_each from ever reading text that is not JSON, which they refuse with an error.
    "sqlite": f"""DELETE FROM budget_ledger WHERE grant_id IN (
WITH r AS {_MATERIALIZED}(SELECT chain, CASE WHEN json_valid(chain) THEN json_type(chain) = 'array' ELSE 0 END AS plain
    FROM budget_reservations WHERE state = 'reserved'),
odd AS {_MATERIALIZED}(SELECT chain FROM r WHERE NOT plain)
SELECT g.id FROM agentgate_grants g WHERE g.expires < ? AND length(g.id) = 64 AND g.id NOT GLOB '*[^0-9a-f]*'
    AND NOT EXISTS (SELECT 1 FROM odd WHERE instr(odd.chain, g.id) > 0)
EXCEPT
SELECT j.value FROM r, json_each(CASE WHEN r.plain THEN r.chain ELSE '[]' END) j WHERE r.plain AND j.type = 'text')""",
    # Every whole run of hexadecimal digits of a chain's text: its grant ids, as agentgate writes
    # chains; text edited by hand keeps at least the budgets a settlement of it would touch (a
    # grant id is written in it whole, between characters that are no hexadecimal digits). No
    # JSON is parsed: a chain that is not JSON cannot make the prune fail.
    "postgresql": """DELETE FROM budget_ledger WHERE grant_id IN (
SELECT g.id FROM agentgate_grants g WHERE g.expires < ? AND g.id ~ '^[0-9a-f]{64}$'
EXCEPT
SELECT (regexp_matches(chain, '[0-9a-f]+', 'g'))[1] FROM budget_reservations WHERE state = 'reserved')""",
}
"""The prune of expired grants' budgets (``prune_expired``; its one parameter, the cut). Only a
grant id as agentgate makes them (64 lower-case hex digits) is pruned. The grant ids that
reservations still held name are read once, as a set that the expired grants are taken from
(EXCEPT: a sort or a hash on both stores): work that grows with the rows, where until review R66
each expired budget was searched for in every held chain's text (budgets x held reservations)."""

_ADDED_COLUMNS = {"entry": "INTEGER", "unit": "TEXT"}
"""The columns of ``budget_reservations`` added in review R61, with their SQLite types
(``add_sqlite_columns``)."""


def _settled_cut(before: float) -> tuple[str, str] | None:
    """How ``BudgetLedger.prune`` finds the reservations settled before ``before`` (Unix
    seconds): the comparison of their ``settled`` column and the time, in its format (a year of
    four digits, ``format_time``: until review R83 the year 385 was ``385``, which sorts after
    ``2026`` as text, and such a ``before`` pruned every settled reservation). ``None`` before the year 1,
    where no time is settled; after the year 9999, every one is (up to its last moment). Until
    review R83 a ``before`` outside those years was a bare ``ValueError``, ``OverflowError``
    or ``OSError`` from ``datetime``, which the approval and dead-letter prunes take."""
    try:
        moment = datetime.fromtimestamp(before, UTC)
    except (OverflowError, OSError, ValueError):
        if before < 0:
            return None
        return "<=", format_time(datetime.max.replace(tzinfo=UTC))
    return "<", format_time(moment)


def _tables(store: Store) -> set[str]:
    """Which of ``audit_log``, ``budget_reservations.entry`` and ``budget_reservations.unit``
    (the columns) the store holds, read without creating anything; SQLite's names in either
    case, as it compares them (``sqlite_name``)."""
    if store.dialect == "sqlite":
        found = tables_held(store.query, "sqlite", ["audit_log"])
        columns = store.query(
            "SELECT name FROM pragma_table_info('budget_reservations') "
            "WHERE name COLLATE NOCASE IN ('entry', 'unit')"
        )
    else:
        found = {
            str(r[0]) for r in store.query("SELECT 'audit_log' WHERE to_regclass('audit_log') IS NOT NULL")
        }
        columns = store.query(
            "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('budget_reservations') "
            "AND attname IN ('entry', 'unit') AND NOT attisdropped"
        )
    return found | {f"budget_reservations.{sqlite_name(str(row[0]))}" for row in columns}


def has_entry_column(store: Store) -> bool:
    """Whether the store's reservations record their ``allow`` entry (``entry``, review R61)."""
    return "budget_reservations.entry" in _tables(store)


def has_unit_column(store: Store) -> bool:
    """Whether the store's reservations record their budget unit (``unit``, review R61)."""
    return "budget_reservations.unit" in _tables(store)


def stored_unit(stored: object) -> str | None:
    """A stored reservation's unit (``budget_reservations.unit``, or the unit a GPU lease's
    decision records with each reservation, ``broker_decisions.reservations``) as a settlement
    writes it into an outcome's ``charges``: ``None`` where the row records none (made before
    review R61, or by a role that could not add the column), or none a budget can be in
    (``BUDGET_UNIT``: a row written outside agentgate, ``"calls\\n"`` or 5,000 characters). Such
    a one is settled as a row without a unit, its outcome without ``charges`` for it. Every
    settlement reads a unit through it: until review R62 ``budget settle`` wrote its text into
    the signed log as a unit charged, and until review R89 ``tasks settle`` (``once.settle``)
    and a GPU lease's end still did."""
    return stored if isinstance(stored, str) and BUDGET_UNIT.fullmatch(stored) else None


def _reservation_id() -> str:
    """32 hex digits: the time in nanoseconds, then 64 random bits (unique across processes).

    Time first, so that new reservations land at the right edge of the primary key's B-tree and
    a settlement, soon after, finds its row on a page the reservation just wrote: fewer pages per
    commit than random ids. (SQLite stores made before this keep their rowid table and its
    separate key index; both orders work.)
    """
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"


MAX_AMOUNT = 2**63 - 1
"""The largest amount a budget can hold (a 64-bit signed column on both stores)."""


def _named(reservation: object) -> str:
    """``reservation`` as a reservation id (text); ``InputError`` for anything else (a list or a
    dict read from a JSON body names no reservation: until review R60 it raised ``TypeError``,
    unhashable, out of the lookup of reservations made here)."""
    if not isinstance(reservation, str):
        raise InputError(f"reservation {quoted(reservation, 60)} does not exist: a reservation id is text")
    return reservation


def may_be_stored(reservation: str) -> bool:
    """Whether a stored reservation may have the id ``reservation`` (and a stored call that must
    run once the key: ``once.settle``): not one holding a NUL character or a lone surrogate (text
    that is not UTF-8), which no id agentgate makes (32 hexadecimal digits) holds, PostgreSQL's
    text cannot hold the one and neither store the other. Such an id is answered as one no
    reservation has, on both stores, without asking the store: ``NotHeld`` for a settlement,
    ``InputError`` for ``reservation``, ``None`` for ``settled``, left out of ``still_held``, not
    merged. Until review R89 SQLite said a NUL does not exist and PostgreSQL refused it with a
    ``StoreError`` (the store failing, to a caller that fails closed), and ``agentgate tasks
    settle`` of a call whose row names one settled it on SQLite and exited 2 on PostgreSQL; until
    review R89b a lone surrogate (a row's JSON ``"\\ud800"``) was that ``StoreError`` on both."""
    return "\x00" not in reservation and (reservation.isascii() or _unicode(reservation))


def _by_id(
    run: Callable[[str, Sequence[object]], list[Row]], sql: str, params: Sequence[object], reservation: str
) -> list[Row]:
    """The rows of ``sql``, a statement naming the reservation ``reservation`` by its id, as
    ``run`` (a transaction's ``execute``, the store's ``query``) returns them; none, and nothing
    run, where no reservation may have that id (``may_be_stored``). Every statement of the
    ledger that names one reservation runs through it."""
    return run(sql, params) if may_be_stored(reservation) else []


_GRANT_ID_CHARS = 256
"""The longest grant id (characters) the ledger keeps a budget by. A grant's id is 64 hexadecimal
digits; a PostgreSQL B-tree index entry (``budget_ledger``'s key) holds about 2.7 KB, 256
characters at most 1 KB of UTF-8, where SQLite has no bound: until review R87 SQLite reserved
against a 10,000-character id and PostgreSQL refused it with a ``StoreError``."""


def _is_grant_id(grant_id: object) -> TypeGuard[str]:
    """Whether ``grant_id`` is text the ledger keeps a budget by: not empty, at most
    ``_GRANT_ID_CHARS`` characters, no NUL character nor lone surrogate (``may_be_stored``:
    until review R89b one was a ``StoreError`` out of either store, where a NUL was refused)."""
    return isinstance(grant_id, str) and 0 < len(grant_id) <= _GRANT_ID_CHARS and may_be_stored(grant_id)


def _grant_id(grant_id: object) -> str:
    """``grant_id`` as the ledger reads a grant's budget by it (``remaining``, ``usage``): text
    that is not empty, holds no NUL character nor lone surrogate and is at most ``_GRANT_ID_CHARS`` characters long
    (``reserve`` refuses any other in a chain); else
    ``InputError``, where the stores would answer differently (a silent nothing on one, a
    ``StoreError`` about the parameter's type, or a NUL PostgreSQL's text cannot hold, on the
    other), or both fail (a lone surrogate, no UTF-8 text)."""
    if not _is_grant_id(grant_id):
        raise InputError(
            "a grant id must be non-empty text without a NUL character or lone surrogate, of at most "
            f"{_GRANT_ID_CHARS} characters, got {quoted(grant_id, 60)}"
        )
    return grant_id


def _amount(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{what} must be a non-negative integer in minor units, got {quoted(value)}")
    return value


def _cap(value: object, grant_id: str) -> int:
    """``value`` as the cap of grant ``grant_id``'s budget: a whole number of minor units from 0 to
    ``MAX_AMOUNT``, what a budget column holds and a grant's budget can be; else ``InputError``
    naming the grant and the bound. Until review R91 a cap past ``MAX_AMOUNT`` was taken by
    ``remaining`` (``2**70`` answered as left) and made ``reserve``'s insert overflow the column, a
    ``StoreError`` that a Gate reads as the store being unavailable."""
    cap = _amount(value, f"cap of grant {grant_id}")
    if cap > MAX_AMOUNT:
        raise InputError(
            f"cap of grant {grant_id} must be at most {MAX_AMOUNT} (2**63-1) minor units, the most a "
            f"budget holds, got {quoted(cap)}"
        )
    return cap


def _too_large(amount: int) -> BudgetExceeded:
    """The refusal of an amount past ``MAX_AMOUNT``, which no budget column holds. The amount is
    quoted by its size past 128 bits (``_shown.quoted``): until review R85 it was written whole,
    and one of more than 4,300 digits (a token estimate of ``10**5000``) made the message itself a
    bare ``ValueError``."""
    return BudgetExceeded(f"an amount ({quoted(amount)}) is more than any budget can hold")


def stored_reservation(reservation: object, chain: object, amount: object) -> tuple[tuple[str, ...], int]:
    """A reservation row's chain (a JSON list of grant ids) and amount; ``MalformedRow`` (a
    ``StoreError``; since review R67 its own kind: nothing tries it again) naming the row when
    they are not (a row written outside agentgate), never a traceback; its id and amount quoted
    cut at 60 characters (since review R62). Every settlement reads a row through it: until
    review R66 only ``held`` did, and ``agentgate tasks settle`` (``once.settle``) of such a row
    ended in ``ValueError`` or ``JSONDecodeError``, or settled a chain of no grant. A chain that
    names a grant twice is malformed too (``reserve`` refuses one): until review R82 it was
    settled, and every settlement wrote that grant's budget once per mention (a refund twice, the
    budget above its cap)."""
    try:
        grants = json.loads(str(chain))
        # A grant id no budget may have (a NUL, a lone surrogate: ``may_be_stored``) is none: its
        # budget would be looked up (PostgreSQL refused a NUL where SQLite found no budget).
        if not isinstance(grants, list) or not grants or not all(_stored_grant(g) for g in grants):
            raise ValueError("its chain is not a list of grant ids")
        if len(set(grants)) != len(grants):
            raise ValueError("its chain names a grant more than once")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise ValueError(f"its amount is {amount!r:.60}")
    except (ValueError, RecursionError) as exc:
        # Cut as ``settle_held`` quotes an id: an edited row may hold 100,000 characters.
        raise MalformedRow(
            f"budget_reservations: the row of reservation {reservation!r:.60} is malformed: {exc}"
        ) from None
    return tuple(grants), amount


def _stored_grant(grant_id: object) -> bool:
    """Whether a stored chain's ``grant_id`` may name a budget: text, not empty, which any store
    may be asked about (``may_be_stored``). Not ``_is_grant_id``: a row reserved before review
    R87 may name a grant id longer than ``reserve`` now takes."""
    return isinstance(grant_id, str) and bool(grant_id) and may_be_stored(grant_id)


def unsettleable(exc: MalformedRow, allowed: AuditEntry | None) -> MalformedRow:
    """``exc``, a held reservation's row found malformed by a settlement or a listing by hand
    (``agentgate budget settle``, ``budget held``, ``tasks settle``), with what the operator can
    do: nothing says what to give back to which budget, so the row is repaired, from its
    ``allow`` entry (``allowed``, where the row names one: the grant and the amount it reserved
    of that grant's budget), and settled then. Until review R68 the message named the row only,
    and the reservation stayed held for good: nothing else settles it, nor prunes it."""
    found = ""
    if allowed is not None:
        found = (
            f"; its allow entry {allowed.index} reserved {allowed.budget_delta} of grant {allowed.chain_hash}"
        )
    return MalformedRow(
        f"{exc}; it cannot be settled as it is: repair its chain (a JSON list of the ids of the "
        f"grants with a budget, root first) and amount (minor units){found}, then settle it"
    )


def _no_budget(reservation: str, grant_id: str) -> MalformedRow:
    """The error for a reservation whose chain names a grant without a ``budget_ledger`` row: a
    row deleted outside agentgate (``prune_expired`` keeps every budget a held reservation
    names), or a chain edited to name another grant. Raised before anything is written that
    the caller's transaction keeps: the settlement is rolled back with it, the reservation held.
    Until review R67 the settlement went on writing nothing to that budget (the reservation
    marked settled), or, charging an overrun, ended in ``IndexError``. A late outcome of a call
    settled by hand meets it after its grant expired and ``prune_expired`` took the budget (no
    reservation held it): until review R69 the text said only "deleted outside agentgate?"."""
    return MalformedRow(
        f"budget_reservations: reservation {reservation!r:.60} names grant {grant_id!r:.80}, "
        "which has no budget_ledger row (pruned by agentgate store prune once its grant expired, "
        "or deleted outside agentgate)"
    )


@dataclass(frozen=True)
class Reservation:
    """A reservation as stored: the chain it was taken from, its amount and its state."""

    id: str
    chain: tuple[str, ...]
    amount: int
    state: str
    actual: int | None


class BudgetLedger:
    """Budgets per grant, shared by every process that uses the same store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("ledger", LEDGER_DDL)
        if store.dialect == "sqlite" and not getattr(store, "read_only", False):
            add_sqlite_columns(store, "budget_reservations", _ADDED_COLUMNS)
        there = _tables(store)
        self._with_unit = "budget_reservations.unit" in there
        self._insert = _insert({"audit_log", "budget_reservations.entry"} <= there, self._with_unit)
        """How a reservation is stored: with its ``allow`` entry's index where the store holds an
        audit log and the column (``held`` finds the entry by it; time is not monotonic), and its
        unit where the store has the column (an outcome settled by hand names it in ``charges``)."""
        self._held: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        """Reservations made here and not yet settled here: id -> (chain as stored, amount, chain)."""
        self._stored_chains: dict[tuple[str, ...], str] = {}
        """The JSON text of the chains reserved against (a column of ``budget_reservations``)."""

    def reserve(
        self,
        tx: Transaction | None,
        chain: Sequence[str],
        caps: Mapping[str, int],
        amount: int,
        *,
        unit: str | None = None,
    ) -> str:
        """Reserve ``amount`` against every grant of ``chain`` (root..tip) that has a cap in ``caps``.

        ``unit``: the budgets' unit, stored with the reservation where the store has the column
        (``held``'s settlement names it in the outcome's ``charges``; ``None``: not known). A unit
        that is neither ``None`` nor a unit name (``BUDGET_UNIT``, as a token's) is an
        ``InputError``, nothing written: until review R91 it was stored as given (``5`` as
        ``'5'``) and read back as no unit (``stored_unit``), its outcome without ``charges``, and
        one holding a NUL was stored on SQLite and a ``StoreError`` on PostgreSQL.

        Grants not in ``caps`` have no budget of their own. A grant's row is created on first use
        with its cap (later caps for the same grant are ignored: a grant's budget is fixed when
        it is signed). Returns the reservation id. Raises ``BudgetExceeded`` naming the first
        grant that lacks the amount (nothing is reserved then, once the transaction rolls back)
        and ``InputError`` for a malformed chain or amount: a chain that is not a list or tuple
        (a generator, a set, a string; until review R93 a generator was a bare ``TypeError``), a grant id holding a NUL character
        too, which no grant's id (hexadecimal) has and PostgreSQL's text cannot hold (until review
        R85 SQLite reserved against it and PostgreSQL refused it with a ``StoreError``; written
        ``\\x00`` instead, as a dead letter's text is, it would share the budget of a grant id
        holding those four characters), and one longer than ``_GRANT_ID_CHARS`` characters, which
        PostgreSQL's index of the ledger cannot hold (until review R87 SQLite reserved against it).
        A cap in ``caps`` of a grant of ``chain`` that is not a whole number of minor units from 0
        to ``MAX_AMOUNT`` is an ``InputError`` too, nothing written (until review R91 one past
        ``MAX_AMOUNT`` overflowed the column: a ``StoreError``). ``caps`` that is not a mapping,
        or names no grant of ``chain``, is an ``InputError``, nothing written: until review R93
        such a reservation charged no budget, bounded no amount, and was stored with an empty
        chain that only this ledger could settle (any other read it as a malformed row).
        A reservation against one grant's
        budget writes nothing when it raises: a caller may go on in ``tx`` without a savepoint.
        """
        amount = _amount(amount, "amount")
        if amount > MAX_AMOUNT:
            raise _too_large(amount)
        if (
            not isinstance(chain, (list, tuple))
            or not chain
            or any(not _is_grant_id(g) for g in chain)
            or len(set(chain)) != len(chain)
        ):
            raise InputError(
                "chain must be a non-empty list or tuple of distinct grant ids (text without a NUL character or lone "
                "surrogate, of "
                f"at most {_GRANT_ID_CHARS} characters), root first"
            )
        if unit is not None and stored_unit(unit) is None:
            raise InputError(
                f"unit must be None or a budget unit name ({BUDGET_UNIT_RULE}), got {quoted(unit)}"
            )
        if not isinstance(caps, Mapping):
            raise InputError(f"caps must be a mapping of grant id to cap, got {quoted(caps, 60)}")
        # Every cap checked before any statement: a malformed one refuses with nothing written.
        budgets = [(grant_id, _cap(caps[grant_id], grant_id)) for grant_id in chain if grant_id in caps]
        if not budgets:
            raise InputError("no grant of the chain has a cap in caps: there is no budget to reserve against")
        if tx is not None:  # the gate's path: no context manager layer per call
            return self._reserve(tx, budgets, amount, unit)
        with self.store.transaction() as own:
            return self._reserve(own, budgets, amount, unit)

    def _reserve(self, t: Transaction, budgets: list[tuple[str, int]], amount: int, unit: str | None) -> str:
        """``reserve`` in ``t``: ``budgets`` are the chain's grants that have a cap, root first,
        each with its cap (checked)."""
        for grant_id, cap in budgets:
            # The conditional update first: once a grant's row exists (every use after the
            # first) it is the only statement. When it changes nothing, the row is created if
            # missing and the same conditional update decides (on PostgreSQL it then also sees
            # a row another transaction created and committed meanwhile).
            t.execute(_RESERVE, (amount, grant_id, amount))
            if t.rowcount != 1:
                if cap < amount:
                    # A row made now could not hold it, nor could one another transaction makes
                    # meanwhile (a grant's cap is fixed by its signature): refused before any
                    # write, so a refusal against one budget leaves ``t`` as it was.
                    raise BudgetExceeded(f"grant {grant_id}: budget has less than {amount} left")
                t.execute(
                    "INSERT INTO budget_ledger (grant_id, cap, remaining) VALUES (?, ?, ?) "
                    "ON CONFLICT (grant_id) DO NOTHING",
                    (grant_id, cap, cap),
                )
                t.execute(_RESERVE, (amount, grant_id, amount))
                if t.rowcount != 1:
                    raise BudgetExceeded(f"grant {grant_id}: budget has less than {amount} left")
        reservation = _reservation_id()
        held = tuple(grant_id for grant_id, _ in budgets)
        stored = self._stored_chains.get(held)
        if stored is None:  # json.dumps costs about 5 us; a gate's calls reuse a few chains
            if len(self._stored_chains) >= _MAX_HELD:
                self._stored_chains.clear()
            stored = self._stored_chains[held] = json.dumps(list(held))
        created = utc_now()
        t.execute(
            self._insert,
            (reservation, stored, amount, created, unit)
            if self._with_unit
            else (reservation, stored, amount, created),
        )
        if len(self._held) >= _MAX_HELD:
            self._held.clear()  # only a shortcut: a reservation not found here is read back
        self._held[reservation] = (stored, amount, held)
        return reservation

    def commit(
        self, reservation: str, actual: int, tx: Transaction | None = None, *, exhaust: bool = False
    ) -> int:
        """Settle ``reservation`` at ``actual``: refund what was not used, charge an overrun.

        An overrun (``actual`` above the reserved amount) that does not fit a grant's budget
        raises ``BudgetExceeded``, and nothing changes once the transaction rolls back (the
        reservation stays open; like ``reserve``'s, let it propagate out of ``tx``), unless
        ``exhaust``: then the grant is charged all it had (the reservation and what was left) and
        its budget is left at zero. Use ``exhaust`` for a call that has already run: its cost is
        a fact to record, not a request to refuse. Returns the largest part of ``actual`` that a
        grant's budget could not cover (0 when everything fit): the caller records it. Raises
        ``InputError`` if the reservation does not exist or was already settled. ``charge``
        settles the same way and says what each grant was charged.
        """
        charged = self.charge(reservation, actual, tx, exhaust=exhaust)
        return max((actual - n for n in charged.values()), default=0)

    def charge(
        self, reservation: str, actual: int, tx: Transaction | None = None, *, exhaust: bool = False
    ) -> dict[str, int]:
        """``commit``, returning what each grant of the reservation's chain was charged (its
        ``spent`` grew by), root first: ``actual`` where it fit, less where ``exhaust`` charged a
        budget all it had; an auditor needs each, since grants of one chain have different
        amounts left (until review R61 only the largest shortfall was known)."""
        actual = _amount(actual, "actual amount")
        if actual > MAX_AMOUNT:  # what no column can hold: never charged, so part of a shortfall
            if not exhaust:
                raise _too_large(actual)
            actual = MAX_AMOUNT
        if tx is not None:
            return self._commit(tx, reservation, actual, exhaust)
        with self.store.transaction() as own:
            return self._commit(own, reservation, actual, exhaust)

    def _commit(self, t: Transaction, reservation: str, actual: int, exhaust: bool) -> dict[str, int]:
        charged: dict[str, int] = {}
        chain, amount = self._settle(t, reservation, "committed", actual)
        delta = amount - actual  # > 0: refund; < 0: overrun to charge
        for grant_id in chain:
            charged[grant_id] = actual
            if delta >= 0:
                t.execute(
                    "UPDATE budget_ledger SET remaining = remaining + ?, spent = spent + ? WHERE grant_id = ?",
                    (delta, actual, grant_id),
                )
                if t.rowcount != 1:
                    raise _no_budget(reservation, grant_id)
                continue
            t.execute(
                "UPDATE budget_ledger SET remaining = remaining - ?, spent = spent + ? "
                "WHERE grant_id = ? AND remaining >= ?",
                (-delta, actual, grant_id, -delta),
            )
            if t.rowcount == 1:
                continue
            if not exhaust:
                raise BudgetExceeded(f"grant {grant_id}: overrun of {-delta} does not fit the budget")
            # Charge what the budget had (the reservation and what was left): ``spent`` never
            # exceeds the cap; the caller records what each grant was charged (the audit entry).
            # What is left is read by an UPDATE, which locks the row (PostgreSQL) until the
            # charge below: a plain SELECT let another process reserve in between, and that
            # reservation was then charged twice (counted in ``left`` and spent on its own).
            # Another process may also have refunded since the conditional update failed, so
            # the overrun may fit now: only the overrun is charged, never all that is left.
            rows = t.execute(
                "UPDATE budget_ledger SET remaining = remaining WHERE grant_id = ? RETURNING remaining",
                (grant_id,),
            )
            if not rows:  # until review R67 an IndexError out of the settlement
                raise _no_budget(reservation, grant_id)
            left = int(rows[0][0])
            overrun = min(left, -delta)
            charged[grant_id] = amount + overrun
            t.execute(
                "UPDATE budget_ledger SET remaining = remaining - ?, spent = spent + ? WHERE grant_id = ?",
                (overrun, amount + overrun, grant_id),
            )
        return charged

    def charge_released(self, reservation: str, actual: int, tx: Transaction) -> dict[str, int]:
        """Charge ``actual`` in ``tx`` for a reservation released already whose call did run (its
        outcome came after a person settled it as not run: ``agentgate tasks settle --not-run``,
        ``budget settle --not-run``); what each grant of its chain was charged, root first. Its
        amount went back at the release, so each budget is charged anew: ``actual`` where it
        has that much left, else all it has (``spent`` never passes the cap; the caller records
        the overrun, as ``charge`` with ``exhaust``). The reservation is marked committed at
        ``actual``, from ``released`` by a conditional update: charged once. ``NotHeld`` when it
        is not released (unknown, pruned, held, or committed), ``MalformedRow`` for a row not
        agentgate's or a chain naming a grant without a budget row (nothing then written that
        ``tx`` keeps, if the caller rolls back to its savepoint). Until review R68 such a call
        was never charged: the release stood, and the budget said less was spent than was."""
        actual = min(_amount(actual, "actual amount"), MAX_AMOUNT)
        rows = _by_id(
            tx.execute,
            "UPDATE budget_reservations SET state = 'committed', actual = ?, settled = ? "
            "WHERE id = ? AND state = 'released' RETURNING chain, amount",
            (actual, utc_now(), _named(reservation)),
            reservation,
        )
        if len(rows) != 1:
            raise NotHeld(f"reservation {quoted(reservation, 60)} does not exist or is not released")
        chain, _ = stored_reservation(reservation, *rows[0])
        return self._charge_anew(reservation, chain, actual, tx)

    def charge_more(self, reservation: str, actual: int, tx: Transaction) -> dict[str, int]:
        """Charge in ``tx`` what a reservation settled by hand as run (``agentgate tasks settle
        --ran``, ``budget settle --ran``: committed as reserved) cost past its amount, now that
        its call's own outcome reports ``actual``; what each grant of its chain was charged now,
        root first: ``actual - amount`` where the budget has that much left, else all it has
        (``spent`` never passes the cap; the caller records the overrun, as ``charge`` with
        ``exhaust``). The row's ``actual`` becomes ``actual``, by a conditional update from a
        commit as reserved below it: charged once. ``NotHeld`` when it is no such reservation
        (unknown, pruned, not committed, committed at another amount, or ``actual`` not above
        its amount), ``MalformedRow`` as for ``charge_released``. Nothing is refunded for a call
        that used less: an outcome's ``charges`` are amounts >= 0 that sum to a grant's spend
        (docs/audit-format.md), and the hand's charge, audited, stands. Until review R69 such a
        call was charged as reserved only."""
        actual = min(_amount(actual, "actual amount"), MAX_AMOUNT)
        rows = _by_id(
            tx.execute,
            "UPDATE budget_reservations SET actual = ? "
            "WHERE id = ? AND state = 'committed' AND actual = amount AND amount < ? RETURNING chain, amount",
            (actual, _named(reservation), actual),
            reservation,
        )
        if len(rows) != 1:
            raise NotHeld(
                f"reservation {quoted(reservation, 60)} does not exist or was not committed as reserved below {actual}"
            )
        chain, amount = stored_reservation(reservation, *rows[0])
        return self._charge_anew(reservation, chain, actual - amount, tx)

    def _charge_anew(
        self, reservation: str, chain: Sequence[str], amount: int, tx: Transaction
    ) -> dict[str, int]:
        """Charge ``amount`` to every grant of ``chain`` in ``tx``, each at most what it has left
        (``charge_released``, ``charge_more``); what each was charged."""
        charged: dict[str, int] = {}
        for grant_id in chain:
            # Read by an UPDATE, which locks the row (PostgreSQL) until the charge below: what
            # is left cannot be reserved by another process in between (as ``_commit``).
            left = tx.execute(
                "UPDATE budget_ledger SET remaining = remaining WHERE grant_id = ? RETURNING remaining",
                (grant_id,),
            )
            if not left:
                raise _no_budget(reservation, grant_id)
            n = min(int(left[0][0]), amount)
            tx.execute(
                "UPDATE budget_ledger SET remaining = remaining - ?, spent = spent + ? WHERE grant_id = ?",
                (n, n, grant_id),
            )
            charged[grant_id] = n
        return charged

    def settled(self, reservation: str, tx: Transaction) -> Reservation | None:
        """``reservation`` as ``tx`` reads it, or ``None`` when there is no row of that id (never
        made, or settled and then pruned: ``prune``); ``MalformedRow`` for a row not agentgate's.
        For a late outcome to say which (review R69)."""
        rows = _by_id(
            tx.execute,
            "SELECT chain, amount, state, actual FROM budget_reservations WHERE id = ?",
            (_named(reservation),),
            reservation,
        )
        if not rows:
            return None
        chain, amount, state, actual = rows[0]
        return Reservation(reservation, *stored_reservation(reservation, chain, amount), str(state), actual)

    def release(self, reservation: str, tx: Transaction | None = None) -> None:
        """Return the whole reservation to every grant; ``InputError`` if unknown or already settled."""
        if tx is None:
            with self.store.transaction() as own:
                self.release(reservation, own)
            return
        chain, amount = self._settle(tx, reservation, "released", 0)
        for grant_id in chain:
            tx.execute(
                "UPDATE budget_ledger SET remaining = remaining + ? WHERE grant_id = ?", (amount, grant_id)
            )
            if tx.rowcount != 1:
                raise _no_budget(reservation, grant_id)

    def merge(self, into: str, other: str, tx: Transaction) -> bool:
        """Move the open reservation ``other``'s amount into the open reservation ``into`` when
        both were taken from the same chain: ``into`` then holds both amounts, and ``other`` is
        settled, committed at 0 with its amount moved (0 left), so that nothing is refunded or
        charged: the grants' budgets are as they were. For a holder that keeps adding to one
        hold (a lease's renewals) with one reservation to settle in the end. False, and nothing
        changed, when either is not open (or not text, or an id no reservation may have:
        ``may_be_stored``), also when it was settled by another transaction while this one ran,
        or their chains differ."""
        if into == other or not isinstance(into, str) or not isinstance(other, str):
            return False
        if not (may_be_stored(into) and may_be_stored(other)):
            return False
        rows = tx.execute(
            "SELECT id, chain, amount FROM budget_reservations WHERE id IN (?, ?) AND state = 'reserved'",
            (into, other),
        )
        found = {str(row[0]): (str(row[1]), int(row[2])) for row in rows}
        if len(found) != 2 or found[into][0] != found[other][0]:
            return False
        moved = found[other][1]
        # Each update must change its row: on PostgreSQL (READ COMMITTED) either reservation may
        # have been settled by a transaction that committed since the read above. Until review
        # R66 that went unnoticed: ``other``, released meanwhile, had its amount refunded and
        # moved into ``into`` too, whose settlement then gave it back a second time.
        tx.execute(
            "UPDATE budget_reservations SET amount = amount + ? WHERE id = ? AND state = 'reserved'",
            (moved, into),
        )
        if tx.rowcount != 1:
            return False  # ``into`` was settled meanwhile: nothing written
        tx.execute(
            "UPDATE budget_reservations SET amount = 0, state = 'committed', actual = 0, settled = ? "
            "WHERE id = ? AND state = 'reserved' AND amount = ?",
            (utc_now(), other, moved),
        )
        if tx.rowcount != 1:  # ``other`` was settled (or changed) meanwhile: ``into`` as it was
            tx.execute("UPDATE budget_reservations SET amount = amount - ? WHERE id = ?", (moved, into))
            return False
        self._held.pop(into, None)  # its amount changed: settled by the general path
        self._held.pop(other, None)
        return True

    def still_held(self, reservations: Sequence[str], tx: Transaction) -> set[str]:
        """Those of ``reservations`` that are open (``reserved``) as ``tx`` reads them: one that was
        settled (by hand, ``store.held``) or never made is not."""
        named = [r for r in reservations if isinstance(r, str) and may_be_stored(r)]
        if not named:
            return set()
        marks = ", ".join("?" * len(named))
        rows = tx.execute(
            f"SELECT id FROM budget_reservations WHERE id IN ({marks}) AND state = 'reserved'", tuple(named)
        )
        return {str(row[0]) for row in rows}

    def _settle(
        self, t: Transaction, reservation: str, state: str, actual: int
    ) -> tuple[tuple[str, ...], int]:
        """Mark ``reservation`` settled (``state``, ``actual``); its chain and amount as stored.
        ``NotHeld`` (an ``InputError``) if it does not exist or is already settled, ``InputError``
        when it is not text, ``MalformedRow`` when its row is not one agentgate writes."""
        known = self._held.pop(_named(reservation), None)
        if known is not None:
            # Reserved by this ledger: the UPDATE names the chain and amount it stored, so a row
            # it changes holds exactly those, and nothing needs reading back. RETURNING costs
            # SQLite (3.40) about 12 us per statement, half this UPDATE's time. When it changes
            # nothing (the reservation's transaction rolled back, or another process settled
            # it), the statement below decides, as for any reservation.
            stored, amount, chain = known
            t.execute(_SETTLE_KNOWN, (state, actual, utc_now(), reservation, stored, amount))
            if t.rowcount == 1:
                return chain, amount
        rows = _by_id(
            t.execute,
            "UPDATE budget_reservations SET state = ?, actual = ?, settled = ? "
            "WHERE id = ? AND state = 'reserved' RETURNING chain, amount",
            (state, actual, utc_now(), reservation),
            reservation,
        )
        if len(rows) != 1:
            raise NotHeld(f"reservation {quoted(reservation, 60)} does not exist or is already settled")
        return stored_reservation(reservation, *rows[0])

    def reservation(self, reservation: str) -> Reservation:
        """One reservation; ``InputError`` if unknown (also when ``reservation`` is not text)."""
        rows = _by_id(
            self.store.query,
            "SELECT chain, amount, state, actual FROM budget_reservations WHERE id = ?",
            (_named(reservation),),
            reservation,
        )
        if not rows:
            raise InputError(f"reservation {quoted(reservation, 60)} does not exist")
        chain, amount, state, actual = rows[0]
        return Reservation(reservation, *stored_reservation(reservation, chain, amount), str(state), actual)

    def prune(self, before: float, *, tx: Transaction | None = None) -> int:
        """Forget the reservations settled (committed or released) before ``before`` (Unix
        seconds); returns how many. A settled reservation's amounts are in its grants' rows and
        in the audit log; one still held is never touched. In ``tx`` when given (``agentgate
        store prune`` prunes every part in one), else in a transaction of its own. ``InputError``
        for a ``before`` that is not a finite number (until review R57, a ``ValueError``
        traceback)."""
        cut = _settled_cut(unix_time(before, "the settled reservations' prune time"))
        if cut is None:
            return 0
        comparison, settled = cut
        with self.store.within(tx) as work:
            work.execute(
                "DELETE FROM budget_reservations WHERE state IN ('committed', 'released') "
                f"AND settled {comparison} ?",
                (settled,),
            )
            return work.rowcount

    def prune_expired(self, before: float, *, tx: Transaction | None = None) -> int:
        """Forget the budgets (``budget_ledger`` rows) of grants recorded in the grant store
        (``agentgate_grants``) as expired before ``before`` (Unix seconds; never one that expired
        less than ``grants.PRUNE_MARGIN_S`` ago); returns how many. Such a grant's chains are
        refused by time, so its budget is never reserved against again; its spend is in the audit
        log. A budget with a reservation still held (``reserved``: a call decided, not yet
        settled) stays until that reservation is settled, which updates the row. Budgets of grants
        never recorded in this store stay: nothing here says when they expire. Run it before
        ``GrantRepository.prune``, which keeps the record of a grant whose budget is still here.
        In ``tx`` when given (``agentgate store prune`` prunes every part in one), else in a
        transaction of its own; the grant store's tables must then exist already (a
        ``GrantRepository`` opened on this store before ``tx`` began: on SQLite, creating them
        would wait for the write lock ``tx`` holds). ``InputError`` for a ``before`` that is not a
        finite number (until review R57, a ``ValueError`` traceback)."""
        from agentgate.store.grants import GRANTS_DDL, expired_cut

        before = unix_time(before, "the expired budgets' prune time")

        self.store.ensure_schema("grants", GRANTS_DDL)
        dialect = self.store.dialect
        with self.store.within(tx) as work:
            cut = expired_cut(work, dialect, before)
            work.execute(_PRUNE_EXPIRED[dialect], (cut,))
            return work.rowcount

    def remaining(self, grant_id: str, *, cap: int | None = None) -> int | None:
        """What is left of a grant's own budget: its cap less what is spent and what
        reservations not settled yet hold. Only the grant's own: an ancestor's budget may have
        less left, and a reservation needs the amount at every budget of the chain.

        A grant's row is made on its first reservation, so a grant with no reservation yet in
        this store has none: a delegated grant whose every reservation was refused at a budget
        above it (rows are taken root first), one never used, one whose row ``prune_expired``
        removed. Nothing is spent or held against it then; ``cap``, the grant's budget as it was
        signed (``grant.budget.amount``), is the answer when given, else ``None`` says there is
        no row. Once the row is made it answers, whatever ``cap`` says (a grant's budget is
        fixed when it is signed; ``reserve`` ignores a later cap too).

        ``InputError`` for a ``grant_id`` that is not non-empty text, holds a NUL character or is
        longer than ``_GRANT_ID_CHARS`` (no grant's id does: ``reserve`` refuses one), or a ``cap`` that is not a whole
        number of minor units from 0 to ``MAX_AMOUNT`` (as ``reserve``)."""
        _grant_id(grant_id)
        if cap is not None:
            cap = _cap(cap, grant_id)
        rows = self.store.query("SELECT remaining FROM budget_ledger WHERE grant_id = ?", (grant_id,))
        return int(rows[0][0]) if rows else cap

    def spent(self, grant_id: str, *, tx: Transaction | None = None) -> int:
        """Committed spend of a grant (its own and its descendants'), 0 if never used; read in
        ``tx`` when given (what it has written counts), else in a short transaction of its own.
        ``InputError`` for a ``grant_id`` that is not non-empty text, holds a NUL character or is
        longer than ``_GRANT_ID_CHARS`` (as ``usage``)."""
        return self.usage(grant_id, tx=tx)[0]

    def usage(self, grant_id: str, *, tx: Transaction | None = None) -> tuple[int, int]:
        """``(spent, held)`` of a grant: its committed spend (as ``spent``) and what reservations
        not settled yet hold of its budget (calls in flight); ``(0, 0)`` if never used.
        ``InputError`` for a ``grant_id`` that is not non-empty text, holds a NUL character or is
        longer than ``_GRANT_ID_CHARS``, as ``remaining``: until review R85 the stores answered one differently (``5``: 0 on SQLite, a
        ``StoreError`` on PostgreSQL; ``["g"]``: a ``StoreError`` on SQLite, ``(0, 0)`` on
        PostgreSQL)."""
        sql = "SELECT spent, cap - remaining - spent FROM budget_ledger WHERE grant_id = ?"
        params = (_grant_id(grant_id),)
        rows = tx.execute(sql, params) if tx is not None else self.store.query(sql, params)
        # An overrun charged past an exhausted budget is spent beyond the cap: nothing is held.
        return (int(rows[0][0]), max(0, int(rows[0][1]))) if rows else (0, 0)
