"""Issued grants, revocations and invocation nonces, for SQLite and PostgreSQL.

Hot path: every decision runs one statement that both checks the chain's grant ids against the
revocation table and records the invocation nonce (``INSERT ... SELECT ... WHERE NOT EXISTS``),
so revocation is read fresh on every decision and no revocation cache can be stale.

A caller that records a decision in a store transaction of its own (``Gate``) binds that
transaction to the repository for the decision (``within``): the nonce statement, revocation
reads and grant records of that thread then run inside it, so the nonce, the decision's audit
entry and its budget reservation commit together, in one commit, as durably as the store's
commits are. Without a bound transaction the nonce statement is its own commit, as follows.

Durability of unbound nonces (docs/token-format.md, "Replay and revocation guarantees"): on SQLite the nonce statement
runs on a dedicated connection in WAL mode with ``synchronous=NORMAL``: a committed nonce
survives a crash or restart of the process (it is in the WAL file) but not a power loss of the
host, and costs no fsync. On PostgreSQL the nonce statement runs as one autocommit round trip
on a pooled connection and sets ``synchronous_commit=off`` for its own transaction
(``set_config(..., true)`` inside the statement): it survives any client crash, and a server crash can lose at most the last ~0.6 s of nonces
(``3 x wal_writer_delay``). ``durable_nonces=True`` makes both fully durable (one fsync each).
Revocations and issued grants are always written durably through the store.

Indexes: grants by ``parent`` (a revocation's cascade, a delegation's earlier grants) and, on
SQLite only, by ``audience`` (``revoke_holder``, a leaked key's grants). On SQLite that statement
reads under the store's write lock, which every decision of every process waits for, and a scan
of 200,000 recorded grants took 0.4 to 1.2 s here; an existing file gets the index when this
version first opens it. On PostgreSQL the read takes no lock a decision waits for, and an index
a later version adds would stop a least-privilege role from starting until ``store init`` runs as
the owner (docs/operations.md, Upgrading), so there is none: the statement scans.

Nonce table: one key ``(expires, principal, nonce)`` (SQLite: ``WITHOUT ROWID``, so the key is the
table): a replayed invocation carries the same signed ``exp``, so it hits the same key; inserts land
at the time-ordered right edge of one B-tree and pruning is a range delete at its left edge.
Compared with the earlier ``(principal, nonce)`` key plus an index on ``expires`` this writes one
B-tree instead of three per decision. Stores created with the earlier schema keep it and work
unchanged (their key is stricter; pruning uses their ``expires`` index).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from agentgate.errors import CommitUnknown, StoreError
from agentgate.store._base import (
    MAX_STORED_INTEGER,
    Dialect,
    Row,
    Store,
    Transaction,
    driver_error_line,
    loaded_driver_errors,
    unix_time,
    unstorable_text,
)
from agentgate.store._sqlite import SQLiteStore

if TYPE_CHECKING:
    import psycopg

    from agentgate.store._postgres import PostgresStore

GRANTS_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_grants (
    id TEXT PRIMARY KEY,
    parent TEXT,
    issuer TEXT NOT NULL,
    audience TEXT NOT NULL,
    expires INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    token TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agentgate_grants_parent ON agentgate_grants (parent);
CREATE INDEX IF NOT EXISTS agentgate_grants_audience ON agentgate_grants (audience);
CREATE TABLE IF NOT EXISTS agentgate_revocations (
    grant_id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS agentgate_nonces (
    expires INTEGER NOT NULL,
    principal TEXT NOT NULL,
    nonce TEXT NOT NULL,
    PRIMARY KEY (expires, principal, nonce)
) WITHOUT ROWID;
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_grants (
    id TEXT PRIMARY KEY,
    parent TEXT,
    issuer TEXT NOT NULL,
    audience TEXT NOT NULL,
    expires BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    token TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agentgate_grants_parent ON agentgate_grants (parent);
CREATE TABLE IF NOT EXISTS agentgate_revocations (
    grant_id TEXT PRIMARY KEY,
    revoked_at BIGINT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS agentgate_nonces (
    expires BIGINT NOT NULL,
    principal TEXT NOT NULL,
    nonce TEXT NOT NULL,
    PRIMARY KEY (expires, principal, nonce)
);
""",
}

NonceStatus = Literal["fresh", "replay", "revoked"]
GrantRow = tuple[str, str | None, str, str, int, str]
"""(id, parent id, issuer did, audience did, expires, chain token up to this grant)."""


@dataclass(frozen=True)
class RecordedGrant:
    """A grant as a store records it (``GrantRepository.record_grants``): the store's word, not
    signed, so each column is as read (a row edited in the database may hold anything)."""

    id: str
    parent: str | None
    """The parent grant's id; ``None`` for a root grant."""
    issuer: str
    audience: str
    expires: object
    """Unix seconds, unless the row was edited (then whatever it holds)."""
    token: object
    """The chain token up to this grant, unless the row was edited."""
    revoked: bool
    """Whether the store records a revocation of this very grant (not of one above it)."""


_PRUNE_EVERY = 1024


_SEEKS_UP_TO = 64
"""Longest list of grant ids looked up with one index seek each (a chain has at most 16 links)."""


@lru_cache(maxsize=64)
def _revoked_sql(n: int) -> str:
    """The revoked ones among ``n`` grant ids bound as parameters.

    One index seek per id (equalities joined by ``UNION ALL``): with ``grant_id IN (?, ...)``
    SQLite first builds an ephemeral index of the listed values, about as costly as the seeks
    (``store_statement`` of benchmarks/authority.py: 48-64 -> 43-54 us for a 3-link chain).
    A list longer than ``_SEEKS_UP_TO``, which no chain gives, keeps the ``IN`` list (SQLite caps
    a compound SELECT at 500 terms), as does an empty one.
    """
    if not 0 < n <= _SEEKS_UP_TO:
        return f"SELECT grant_id FROM agentgate_revocations WHERE grant_id IN ({','.join('?' * n)})"
    return " UNION ALL ".join(["SELECT grant_id FROM agentgate_revocations WHERE grant_id = ?"] * n)


@lru_cache(maxsize=64)
def _consume_sql(n: int) -> str:
    return (
        "INSERT INTO agentgate_nonces (principal, nonce, expires) "
        f"SELECT ?, ?, CAST(? AS BIGINT) WHERE NOT EXISTS ({_revoked_sql(n)}) "
        "ON CONFLICT DO NOTHING"
    )


@lru_cache(maxsize=32)
def _consume_pg_sql(n: int, durable: bool) -> str:
    """The PostgreSQL form of ``_consume_sql``, for one autocommit round trip. It keeps the ``IN``
    list, which PostgreSQL searches as one index scan (no ephemeral index, as SQLite builds).

    Unless ``durable``, the statement itself sets ``synchronous_commit`` off for its own
    (implicit) transaction, so no ``BEGIN``/``SET LOCAL``/``COMMIT`` round trips are needed.
    """
    marks = ",".join(["%s"] * n)
    source = "(SELECT set_config('synchronous_commit', 'off', true)) AS cfg " if not durable else ""
    return (
        "INSERT INTO agentgate_nonces (principal, nonce, expires) "
        f"SELECT %s, %s, CAST(%s AS BIGINT) {'FROM ' + source if source else ''}WHERE NOT EXISTS "
        f"(SELECT 1 FROM agentgate_revocations WHERE grant_id IN ({marks})) "
        "ON CONFLICT DO NOTHING"
    )


def _prune_before() -> int:
    """Nonces of invocations that expired over an hour ago (by this clock, never by a time the
    caller signed: a far-off expiry would otherwise prune every live nonce) can go."""
    return int(time.time()) - 3600


_PRUNE_SQL: dict[Dialect, str] = {
    "sqlite": "DELETE FROM agentgate_nonces WHERE expires < ?",
    # The earlier of this host's clock and the database server's: several hosts share one nonce
    # table, and one whose clock runs over an hour ahead would otherwise delete the nonces of
    # invocations the others still accept (a replay to any of them). A SQLite file has one host.
    "postgresql": "DELETE FROM agentgate_nonces WHERE expires < "
    "LEAST(CAST(? AS BIGINT), CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS BIGINT) - 3600)",
}


PRUNE_MARGIN_S = 3600
"""``prune`` never removes what a grant expired less than this long ago (by this host's clock
or, on PostgreSQL, the server's, whichever is earlier): a host whose clock runs behind still
refuses the grant by time, so nothing it could still accept loses its revocation or budget row."""

_SERVER_NOW = "SELECT CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS BIGINT)"


_PRUNE_PAGE = 1000
"""The revoked grants ``GrantRepository.prune`` reads and checks in one statement's page."""


_HOLDER_PAGE = 1000
"""The rows of a holder's grants ``GrantRepository.revoke_holder`` reads, checks and revokes in
one page (a token check is tens of microseconds: a page is tens of milliseconds of work)."""

_REVOKED_BEFORE = "CASE WHEN r.grant_id IS NULL THEN 0 ELSE 1 END"
_HOLDER_READ = (
    f"SELECT g.id, g.token, {_REVOKED_BEFORE} FROM agentgate_grants g "
    "LEFT JOIN agentgate_revocations r ON r.grant_id = g.id WHERE "
)
"""The rows ``revoke_holder`` checks, and whether each was revoked before; the condition follows."""


def _revoke_page(
    tx: Transaction,
    trusted: Sequence[tuple[str, object]],
    now: int,
    reason: str,
    revoked: list[str],
    already: list[str],
) -> None:
    """Revoke the ids of ``trusted`` (``(id, revoked before)``) not revoked before, and add each
    id to ``revoked`` (revoked by this statement) or ``already``."""
    todo = [gid for gid, was in trusted if not was]
    done: set[str] = set()
    for i in range(0, len(todo), 200):  # 3 parameters a row: under any SQLite's limit
        part = todo[i : i + 200]
        values = ",".join(["(?, ?, ?)"] * len(part))
        params = [v for gid in part for v in (gid, now, reason)]
        inserted = tx.execute(
            f"INSERT INTO agentgate_revocations (grant_id, revoked_at, reason) VALUES {values} "
            "ON CONFLICT DO NOTHING RETURNING grant_id",
            params,
        )
        done.update(str(r[0]) for r in inserted)
    for gid, _ in trusted:
        (revoked if gid in done else already).append(gid)


def expired_cut(tx: Transaction, dialect: Dialect, before: float) -> int:
    """The cut below which a grant's ``expires`` marks it long expired: ``before``, but never
    later than ``PRUNE_MARGIN_S`` before now (this host's clock, and on PostgreSQL the server's),
    and never earlier than the least integer a store holds (-2**63), below which no ``expires`` is:
    until review R85 a finite ``before`` past it (-1e19, which ``unix_time`` takes) made SQLite
    refuse the prune with a ``StoreError`` while PostgreSQL pruned nothing, as now both do."""
    cut = min(max(int(before), -MAX_STORED_INTEGER - 1), int(time.time()) - PRUNE_MARGIN_S)
    if dialect == "postgresql":
        cut = min(cut, int(tx.execute(_SERVER_NOW)[0][0]) - PRUNE_MARGIN_S)
    return cut


class _Bound(threading.local):
    """The transaction bound to this thread (``GrantRepository.within``); ``None`` when unbound.

    A class default, so that reading it on a thread that never bound one is a plain lookup (with
    ``getattr(local, "tx", None)`` every decision raised and cleared an ``AttributeError``)."""

    tx: Transaction | None = None


class GrantRepository:
    """Persistence of the authority engine. Thread-safe; every failure is a ``StoreError``."""

    def __init__(self, store: Store, *, durable_nonces: bool = False) -> None:
        self.store = store
        self.durable_nonces = durable_nonces
        store.ensure_schema("grants", GRANTS_DDL)
        self._lock = threading.Lock()  # the hot connection's; held while it waits for SQLite
        # Nonces recorded (``next`` is atomic: no lock needed). From 0: the first nonce prunes, so
        # a process that records fewer than ``_PRUNE_EVERY`` (``agentgate grant check``: one) does too.
        self._consumed = itertools.count(0)
        self._bound = _Bound()
        self._hot: sqlite3.Connection | None = None
        self._sqlite = store if isinstance(store, SQLiteStore) else None
        self._postgres: PostgresStore | None = None
        if store.dialect == "postgresql":
            from agentgate.store._postgres import PostgresStore

            if isinstance(store, PostgresStore):
                self._postgres = store
        self._hot_pid = os.getpid()
        if isinstance(store, SQLiteStore):
            self._hot = store.connect("FULL" if durable_nonces else "NORMAL")

    @contextmanager
    def within(self, tx: Transaction) -> Iterator[None]:
        """Run this thread's nonce statements, revocation reads and grant records inside ``tx``
        until the block ends (see the module docstring). Their writes then commit or roll back
        with ``tx``; a statement that fails raises ``StoreError`` and leaves ``tx`` to the caller."""
        previous = self._bound.tx
        self._bound.tx = tx
        try:
            yield
        finally:
            self._bound.tx = previous

    def _bound_tx(self) -> Transaction | None:
        return self._bound.tx

    # --- grants and revocations ---------------------------------------------------------------

    def record_grants(self, rows: Iterable[GrantRow], *, now: int) -> None:
        """Remember issued grants (idempotent), so that ``revoke`` by id can list descendants."""
        sql = (
            "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        bound = self._bound_tx()
        if bound is not None:
            try:
                bound.executemany(sql, [(*row, now) for row in rows])
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot record grants: {driver_error_line(exc)}") from exc
            return
        with self.store.transaction() as tx:
            tx.executemany(sql, [(*row, now) for row in rows])

    @staticmethod
    def recorded(store: Store, grant_id: str) -> RecordedGrant | None:
        """The grant ``grant_id`` as ``store`` records it, with whether it is revoked; ``None``
        where the store records no such grant (a mistyped id, a grant made offline or recorded in
        another store). Static: it reads a bare store in one statement and creates nothing, so a
        store opened read only (``audit explain``) is read as it is. Raises ``StoreError`` where
        the tables cannot be read (a store that has none)."""
        rows = store.query(
            "SELECT g.parent, g.issuer, g.audience, g.expires, g.token, r.grant_id FROM agentgate_grants g "
            "LEFT JOIN agentgate_revocations r ON r.grant_id = g.id WHERE g.id = ?",
            (grant_id,),
        )
        if not rows:
            return None
        parent, issuer, audience, expires, token, revoked = rows[0]
        return RecordedGrant(
            grant_id,
            None if parent is None else str(parent),
            str(issuer),
            str(audience),
            expires,
            token,
            revoked is not None,
        )

    @staticmethod
    def recorded_chain(store: Store, tip: str) -> Iterator[RecordedGrant]:
        """The grants of the chain whose tip is ``tip``, walking up from the tip by their
        ``parent`` as ``store`` records them (``recorded``, one read per link), until a grant the
        store does not record, the root, or a grant seen already (a cycle of rows written by
        hand ends)."""
        seen: set[str] = set()
        current: str | None = tip
        while current is not None and current not in seen:
            seen.add(current)
            row = GrantRepository.recorded(store, current)
            if row is None:
                return
            yield row
            current = row.parent

    def delegated(self, parent: str, audience: str, *, now: int) -> list[tuple[str, str]]:
        """``(id, chain token)`` of the unexpired grants recorded as delegated from ``parent`` to
        ``audience``, newest first (``Gate.delegate``, handing a sub-agent's grant on again, once
        the token verifies: a row is the word of whoever may insert into the table)."""
        rows = self.store.query(
            "SELECT id, token FROM agentgate_grants WHERE parent = ? AND audience = ? AND expires > ? "
            "ORDER BY recorded_at DESC, id",
            (parent, audience, now),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def descendants(self, grant_id: str) -> list[str]:
        """Ids of recorded grants below ``grant_id`` (children, grandchildren..., within 64
        levels), nearest first, then by id: each once, and never ``grant_id`` itself, whatever
        rows are planted (until review R85 a cycle of two rows listed 64 ids, two of them, the
        grant's own among them). Raises ``StoreError``."""
        return self._below({grant_id})

    def descendants_of(self, grant_ids: Collection[str]) -> list[str]:
        """Ids of the recorded grants below any of ``grant_ids`` (children, grandchildren...,
        within ``descendants``'s 64 levels) that are not among them, sorted: in one statement
        however many ids are given, bound as one parameter (a PostgreSQL array, a JSON array
        on SQLite: no limit on parameters). ``grant revoke --holder`` lists what it cut off with
        it: until review R72 one ``descendants`` statement per grant revoked. Raises
        ``StoreError``."""
        return sorted(self._below(set(grant_ids)))

    def _below(self, given: set[str]) -> list[str]:
        """The one statement of ``descendants`` and ``descendants_of``: the ids of the recorded
        grants below any of ``given`` and not among them, each once, by the fewest levels at
        which it is reached, then by id. A cycle of rows (written by hand: a grant's id hashes
        its parent's, so no issued chain loops) ends at the 64th level."""
        if not given:
            return []
        if self.store.dialect == "postgresql":
            seeds: str = "parent = ANY(?)"
            bound: object = sorted(given)
        else:
            seeds, bound = "parent IN (SELECT value FROM json_each(?))", json.dumps(sorted(given))
        rows = self.store.query(
            "WITH RECURSIVE below(id, level) AS ("
            f" SELECT id, 1 FROM agentgate_grants WHERE {seeds}"
            " UNION SELECT g.id, b.level + 1 FROM agentgate_grants g JOIN below b ON g.parent = b.id"
            " WHERE b.level < 64"
            ") SELECT id FROM below GROUP BY id ORDER BY MIN(level), id",
            (bound,),
        )
        return [gid for gid in (str(r[0]) for r in rows) if gid not in given]

    def revoke(self, grant_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke one grant, durably; every chain through it is dead from the next decision on.

        Returns False when it was already revoked. Descendants need no rows of their own: every
        decision checks every link of its chain. ``reason`` is kept whole: ``authority.revoke``
        refuses one longer than ``MAX_FREE_TEXT`` before it comes here (until review R85 the row
        kept its first 500 characters, the audit entry all of them).
        """
        sql = (
            "INSERT INTO agentgate_revocations (grant_id, revoked_at, reason) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING"
        )
        bound = self._bound_tx()
        if bound is not None:  # in the caller's transaction (``within``): with its audit entry
            try:
                bound.execute(sql, (grant_id, now, reason))
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot record the revocation: {driver_error_line(exc)}") from exc
            return bound.rowcount == 1
        with self.store.transaction() as tx:
            tx.execute(sql, (grant_id, now, reason))
            return tx.rowcount == 1

    def recorded_rows(self, *, page: int = 500) -> Iterator[tuple[str, str, object]]:
        """``(id, audience column, token)`` of every recorded grant, by id, read ``page`` rows at a
        time, each page in a short read transaction of its own on the store (never this thread's
        bound one): on SQLite no write lock is taken and no decision waits. Every row committed
        before the first page is read and not removed since is yielded once; one committed
        during the read may be or not (``authority.scan_holder``). Raises ``StoreError``."""
        after = ""
        while True:
            rows = self.store.query(
                "SELECT id, audience, token FROM agentgate_grants WHERE id > ? ORDER BY id LIMIT ?",
                (after, page),
            )
            for gid, audience, token in rows:
                yield str(gid), str(audience), token
            if len(rows) < page:
                return
            after = str(rows[-1][0])

    def revoke_holder(
        self,
        audience: str,
        *,
        now: int,
        reason: str = "",
        holds: Callable[[object, str], bool],
        also: Collection[str] = (),
    ) -> tuple[list[str], list[str], list[str]]:
        """Revoke every grant recorded with ``audience`` (a did:key) as its audience whose recorded
        token says so (``holds(token, grant_id)``: the authority layer reads tokens,
        ``authority.revoke_holder``), and every grant of ``also`` (ids whose rows name another
        audience, found by ``authority.scan_holder``) whose row, read again here, still holds, in
        one transaction: the caller's bound one (``within``: with its audit entries), else its
        own. Returns ``(revoked, already, untrusted)``: the ids revoked now, those that were
        revoked before, and those of rows whose column names ``audience`` but whose token does
        not (nothing written for them), each sorted. An id of ``also`` whose row is gone or no
        longer holds is in none of them. Descendants need no rows of their own, as for ``revoke``.

        A row is the word of whoever may insert into the table (the application role): until
        review R68 the ``audience`` column alone was trusted, so a row planted ahead of a real
        grant's record, with its id and another audience, had that grant revoked by a
        revocation of the other key. The rows are read once, by the index on ``audience`` on
        SQLite, and those of ``also`` by id, each token checked once: the work under the lock
        grows with the holder's rows, not the table's (the whole table is read before, outside
        the lock, by ``recorded_rows``). They are read, checked and revoked ``_HOLDER_PAGE`` rows
        at a time (``_holder_pages``), so that the transaction is never idle for long between two
        statements and holds one page of tokens; it is still one transaction: a failure in any
        page revokes nothing (until review R71 one statement read them all); in the caller's
        transaction, the call is a savepoint of it, which a failure leaves as it was.

        The grants revoked are exactly those recorded (their recording transaction committed)
        when the grants are read: before the write lock is taken on SQLite (the transaction takes
        it first), before the cursor that reads them is declared on PostgreSQL. A grant recorded later is not
        revoked, and one recorded earlier is, with all its descendants: never some of a read
        set. A row of ``also`` is revoked if it still holds when read here (the scan that named
        it read it earlier, outside this transaction). A grant to ``audience`` that this store
        never recorded (issued or delegated to it offline, or recorded in another store) is not
        revoked: no store can list it. Needs only
        ``SELECT`` on ``agentgate_grants`` and ``SELECT, INSERT`` on ``agentgate_revocations``
        (PostgreSQL's application role has them). Raises ``StoreError``.
        """
        bound = self._bound_tx()
        if bound is not None:
            try:
                # A savepoint: a failure in a later page (a refused statement, ``holds`` raising)
                # takes the earlier pages' revocations, and PostgreSQL's cursor, with it, and
                # leaves the caller's transaction as it was (until review R71 they stayed in
                # it, unaudited, and a retry in it reported them ``already`` revoked, or on
                # PostgreSQL could not declare its cursor again).
                with bound.savepoint("agentgate_revoke_holder"):
                    return self._revoke_holder(bound, audience, now, reason, holds, also)
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot record the revocations: {driver_error_line(exc)}") from exc
        with self.store.transaction() as tx:
            return self._revoke_holder(tx, audience, now, reason, holds, also)

    def _revoke_holder(
        self,
        tx: Transaction,
        audience: str,
        now: int,
        reason: str,
        holds: Callable[[object, str], bool],
        also: Collection[str],
    ) -> tuple[list[str], list[str], list[str]]:
        # A page at a time (``_HOLDER_PAGE``): each page's tokens checked and its revocations
        # written before the next page is read, so that the transaction is never idle longer than
        # one page's checks (PostgreSQL ends a session idle in a transaction for
        # ``idle_in_transaction_session_timeout``: 30 s unless set, ``_postgres``) and holds one
        # page's tokens, not the holder's all. Until review R71 all of them were read in one
        # statement and checked before the next: a key with about a million recorded grants
        # could not be revoked on PostgreSQL. What one read gives is unchanged: see ``_holder_pages``.
        page = _HOLDER_PAGE
        wanted = set(also)
        revoked: list[str] = []
        already: list[str] = []
        untrusted: list[str] = []
        named: set[str] = set()  # the ids of ``also`` whose rows name ``audience``: read here already
        for rows in self._holder_pages(tx, audience, page):
            trusted = []
            for gid, token, was in rows:
                grant_id = str(gid)
                if grant_id in wanted:
                    named.add(grant_id)
                if holds(token, grant_id):
                    trusted.append((grant_id, was))
                else:
                    untrusted.append(grant_id)
            _revoke_page(tx, trusted, now, reason, revoked, already)
        elsewhere = sorted(wanted - named)
        step = min(page, 200)  # ids bound as parameters: under any SQLite's limit
        for i in range(0, len(elsewhere), step):  # the scan's rows, by id: each must hold still
            part = elsewhere[i : i + step]
            found = tx.execute(f"{_HOLDER_READ}g.id IN ({','.join('?' * len(part))})", part)
            trusted = [(str(gid), was) for gid, token, was in found if holds(token, str(gid))]
            _revoke_page(tx, trusted, now, reason, revoked, already)
        return sorted(revoked), sorted(already), sorted(untrusted)

    def _holder_pages(self, tx: Transaction, audience: str, page: int) -> Iterator[list[Row]]:
        """``(id, token, revoked before: 0 or 1)`` of every row that names ``audience``, ``page``
        rows at a time, each read as one snapshot gives them: the rows committed before the
        first page is read (on SQLite, before ``tx`` took the write lock), none committed later
        (``revoke_holder``). SQLite: by the index on ``audience`` and the row's ``rowid``, a seek
        per page, under the write lock that ``tx`` holds. PostgreSQL: a cursor of ``tx``, its
        snapshot taken as it is declared (under READ COMMITTED a statement per page would see
        what was committed between two pages), ``FETCH`` a page at a time; the table has no index
        on ``audience`` (module docstring), so the cursor reads it once, not once per page."""
        if self.store.dialect == "postgresql":
            tx.execute(
                f"DECLARE agentgate_holder_rows NO SCROLL CURSOR FOR {_HOLDER_READ}g.audience = ?",
                (audience,),
            )
            while True:
                rows = tx.execute(f"FETCH FORWARD {int(page)} FROM agentgate_holder_rows")
                if rows:
                    yield rows
                if len(rows) < page:
                    break
            tx.execute("CLOSE agentgate_holder_rows")
            return
        after = 0
        while True:
            rows = tx.execute(
                f"SELECT g.rowid, g.id, g.token, {_REVOKED_BEFORE} FROM agentgate_grants g "
                "LEFT JOIN agentgate_revocations r ON r.grant_id = g.id "
                "WHERE g.audience = ? AND g.rowid > ? ORDER BY g.rowid LIMIT ?",
                (audience, after, page),
            )
            if rows:
                yield [row[1:] for row in rows]
            if len(rows) < page:
                return
            after = int(rows[-1][0])

    def _hot_connection(self) -> sqlite3.Connection | None:
        if self._sqlite is not None and self._hot is None:
            raise StoreError("the grant repository is closed")
        if self._sqlite is not None and self._hot_pid != os.getpid():
            # A child process (``fork``): the store closes the connection it inherited
            # (``SQLiteStore._leave_inherited``) as it opens this one.
            self._lock = threading.Lock()  # copied as it was: perhaps held by a thread not copied
            self._hot = self._sqlite.connect("FULL" if self.durable_nonces else "NORMAL")
            self._hot_pid = os.getpid()
        return self._hot

    def revoked(self, grant_ids: Sequence[str]) -> set[str]:
        """Which of ``grant_ids`` are revoked, read fresh from the store."""
        if not grant_ids:
            return set()
        sql = _revoked_sql(len(grant_ids))
        bound = self._bound_tx()
        if bound is not None:
            try:
                rows = bound.execute(sql, tuple(grant_ids))
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot read revocations: {driver_error_line(exc)}") from exc
            return {str(r[0]) for r in rows}
        hot = self._hot_connection()
        if hot is not None:
            if self._sqlite is not None:
                # The hot connection reads on from a file removed or replaced at the path (a
                # restore with ``mv``), where revocations made since are not: refused, as a nonce
                # is (``Authority.decide_held`` outside a Gate read no revocation there, an allow).
                self._sqlite.check_in_place()
            with self._lock:
                try:
                    rows = hot.execute(sql, tuple(grant_ids)).fetchall()
                except sqlite3.Error as exc:
                    raise self._hot_error(exc, "cannot read revocations") from exc
                except UnicodeEncodeError as exc:  # the hot connection is no Transaction
                    raise unstorable_text(exc) from None
        else:
            rows = self.store.query(sql, tuple(grant_ids))
        return {str(r[0]) for r in rows}

    # --- nonces ----------------------------------------------------------------------------------

    def consume_nonce(
        self, principal: str, nonce: str, expires: int, grant_ids: Sequence[str]
    ) -> NonceStatus:
        """Record an invocation nonce unless a grant in ``grant_ids`` is revoked or it was seen before.

        One statement: ``revoked`` when any grant id is revoked (nothing recorded), ``replay`` when
        ``(principal, nonce)`` is already stored, else ``fresh``. Raises ``StoreError`` when the
        store cannot answer, which the caller turns into a deny.
        """
        sql = _consume_sql(len(grant_ids))
        params = (principal, nonce, expires, *grant_ids)
        bound = self._bound_tx()
        hot = self._hot_connection() if bound is None else None
        if bound is not None:
            # Not under ``_lock``: a thread holding it may be waiting for the write lock that ``bound``
            # holds, and taking it here would deadlock the two.
            try:
                bound.execute(sql, params)
                changed = bound.rowcount
                if next(self._consumed) % _PRUNE_EVERY == 0:
                    bound.execute(_PRUNE_SQL[self.store.dialect], (_prune_before(),))
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot record the invocation nonce: {driver_error_line(exc)}") from exc
        elif hot is not None:
            if self._sqlite is not None:  # a nonce written to a removed file would be fresh again
                self._sqlite.check_in_place()
            with self._lock:
                try:
                    changed = hot.execute(sql, params).rowcount
                    if next(self._consumed) % _PRUNE_EVERY == 0:
                        hot.execute(_PRUNE_SQL["sqlite"], (_prune_before(),))
                except sqlite3.Error as exc:
                    raise self._hot_error(exc, "cannot record the invocation nonce") from exc
                except UnicodeEncodeError as exc:
                    raise unstorable_text(exc) from None
        elif self._postgres is not None:
            changed = self._consume_pg(params, len(grant_ids))
            if next(self._consumed) % _PRUNE_EVERY == 0:
                with self.store.transaction() as tx:
                    tx.execute(_PRUNE_SQL["postgresql"], (_prune_before(),))
        else:
            with self.store.transaction(immediate=False) as tx:
                if not self.durable_nonces:
                    tx.execute("SET LOCAL synchronous_commit TO OFF")
                tx.execute(sql, params)
                changed = tx.rowcount
                if next(self._consumed) % _PRUNE_EVERY == 0:
                    tx.execute(_PRUNE_SQL[self.store.dialect], (_prune_before(),))
        if changed == 1:
            return "fresh"
        return "revoked" if self.revoked(grant_ids) else "replay"

    def _hot_error(self, exc: sqlite3.Error, doing: str) -> StoreError:
        """The ``StoreError`` for ``exc`` met on the SQLite hot connection: the store's own line
        when another process held the write lock past the busy timeout (``SQLiteStore.busy``;
        until review R64 ``cannot record the invocation nonce: database is locked``), else
        ``doing`` and the driver's line."""
        busy = self._sqlite.busy(exc) if self._sqlite is not None else None
        return busy or StoreError(f"{doing}: {driver_error_line(exc)}")

    def _consume_pg(self, params: tuple[object, ...], n: int) -> int:
        """Run the nonce statement on PostgreSQL in one autocommit round trip; its row count.

        On a connection that ``PostgresStore`` tests first when it sat idle (``IDLE_CHECK_S``),
        as every transaction's is: a server's ``idle_session_timeout`` (or a proxy) closes idle
        ones, and the first decision without a bound transaction after a quiet spell failed."""
        assert self._postgres is not None
        used: psycopg.Connection[Any] | None = None
        try:
            with self._postgres._connection() as conn:
                used = conn
                conn.autocommit = True
                try:
                    return conn.execute(_consume_pg_sql(n, self.durable_nonces), params).rowcount
                except UnicodeEncodeError as exc:  # encoded before it is sent: nothing ran
                    raise unstorable_text(exc) from None
                finally:
                    if not conn.closed:
                        conn.autocommit = False
        except loaded_driver_errors() as exc:
            from psycopg.errors import LockNotAvailable, ReadOnlySqlTransaction
            from psycopg_pool import PoolTimeout

            from agentgate.store._postgres import _redact, read_only_server, recheck

            if isinstance(exc, PoolTimeout):  # a psycopg.Error too: its message does not say why
                raise StoreError(
                    f"cannot record the invocation nonce: {self._postgres._no_connection()}"
                ) from exc
            if isinstance(exc, ReadOnlySqlTransaction):  # as a transaction's refused write says it
                said = read_only_server(_redact(self._postgres.url), driver_error_line(exc))
                raise StoreError(f"cannot record the invocation nonce: {said}") from exc
            if isinstance(exc, LockNotAvailable):  # as a transaction that meets the lock says it
                raise StoreError(f"cannot record the invocation nonce: {self._postgres.busy()}") from exc
            if used is not None and used.broken:
                recheck(self._postgres.pool)
                # The statement is its own commit: the server may have run it, the answer lost
                # (until review R68 said as a failure alone, and the same invocation decided again
                # was then refused as a replay with nothing to say why).
                raise CommitUnknown(
                    "cannot record the invocation nonce: the connection to the PostgreSQL store "
                    f"{_redact(self._postgres.url)} was lost while its statement ran "
                    f"({driver_error_line(exc)}): the server may have recorded it or not, so this "
                    "invocation decided again may be refused as a replay: sign the call afresh"
                ) from exc
            raise StoreError(f"cannot record the invocation nonce: {driver_error_line(exc)}") from exc

    def prune(self, before: float, *, expired: Callable[[object, str, int], bool]) -> tuple[int, int]:
        """Forget the grants that expired before ``before`` (Unix seconds; never one that expired
        less than ``PRUNE_MARGIN_S`` ago), in one transaction; returns ``(grants, revocations)``
        deleted. Each grant's row (its chain token) goes, and so do whole subtrees (a child never
        outlives its parent). Any chain through an expired grant is refused by time, so its
        revocation row is no longer needed either, and goes when the grant's recorded token
        proves it expired (``expired(token, grant_id, cut)``: the authority layer reads tokens,
        ``authority.prune_grants``) and no approval request still kept
        (``approval_grants``) refers to it: such a request reads as void through that row. A
        revocation of a grant never recorded here, or not expired, stays, and so does the record
        of a grant whose revocation or budget (``budget_ledger``; ``BudgetLedger.prune_expired``
        removes it first unless a reservation is held) stays, so that a later prune removes both.

        Needs ``DELETE`` on ``agentgate_grants`` and ``agentgate_revocations`` (PostgreSQL's
        application role has none: run it as the owner); it issues no ``DELETE`` when nothing is
        to go, so a role without them prunes nothing without error. In this thread's bound
        transaction (``within``: ``agentgate store prune`` prunes every part in one) when there
        is one, else in a transaction of its own; the approvals' and the ledger's tables must then
        exist already (an ``ApprovalStore`` and a ``BudgetLedger`` opened on this store before the
        transaction began: on SQLite, creating them would wait for the write lock it holds).
        Raises ``StoreError`` (in a bound transaction, caused by the driver's error, and the
        transaction left to the caller), and ``InputError`` for a ``before`` that is not a finite
        number (until review R57, a ``ValueError`` traceback).
        """
        before = unix_time(before, "the grants' prune time")
        from agentgate.store.approvals import APPROVALS_DDL
        from agentgate.store.ledger import LEDGER_DDL

        self.store.ensure_schema("approvals", APPROVALS_DDL)
        self.store.ensure_schema("ledger", LEDGER_DDL)
        bound = self._bound_tx()
        if bound is not None:
            try:
                return self._prune(bound, before, expired)
            except loaded_driver_errors() as exc:
                raise StoreError(f"cannot prune the expired grants: {driver_error_line(exc)}") from exc
        with self.store.transaction() as tx:
            return self._prune(tx, before, expired)

    def _prune(
        self, work: Transaction, before: float, expired: Callable[[object, str, int], bool]
    ) -> tuple[int, int]:
        kept = (
            "expires < ? AND NOT EXISTS (SELECT 1 FROM agentgate_revocations r WHERE r.grant_id = "
            "agentgate_grants.id) AND NOT EXISTS (SELECT 1 FROM budget_ledger b WHERE b.grant_id = "
            "agentgate_grants.id)"
        )
        cut = expired_cut(work, self.store.dialect, before)
        # Read and checked a page at a time: each check parses a token (tens of microseconds),
        # and a transaction idle between two statements longer than PostgreSQL's
        # ``idle_in_transaction_session_timeout`` (30 s unless set: ``_postgres``) is ended by
        # the server. Until review R70's second reading every row was read in one statement and
        # checked before the next: a store with a million such grants could not be pruned.
        found: set[str] = set()
        after = ""
        while True:
            revoked = work.execute(
                "SELECT r.grant_id, g.token FROM agentgate_revocations r "
                "JOIN agentgate_grants g ON g.id = r.grant_id WHERE g.expires < ? AND r.grant_id > ? "
                "AND NOT EXISTS (SELECT 1 FROM approval_grants a WHERE a.grant_id = r.grant_id) "
                "ORDER BY r.grant_id LIMIT ?",
                (cut, after, _PRUNE_PAGE),
            )
            found.update(str(gid) for gid, token in revoked if expired(token, str(gid), cut))
            if len(revoked) < _PRUNE_PAGE:
                break
            after = str(revoked[-1][0])
        gone = sorted(found)
        revocations = 0
        for i in range(0, len(gone), 500):
            part = gone[i : i + 500]
            work.execute(
                f"DELETE FROM agentgate_revocations WHERE grant_id IN ({','.join('?' * len(part))})",
                tuple(part),
            )
            revocations += work.rowcount
        if not gone and not work.execute(f"SELECT 1 FROM agentgate_grants WHERE {kept} LIMIT 1", (cut,)):
            return 0, 0
        work.execute(f"DELETE FROM agentgate_grants WHERE {kept}", (cut,))
        return work.rowcount, revocations

    def close(self) -> None:
        """Close the dedicated connection (the store itself stays open)."""
        if self._hot_pid != os.getpid():
            # A child's that never used it: the connection is the store's to close with the others
            # the child inherited (``SQLiteStore._leave_inherited``), and the lock may be held.
            self._hot = None
            return
        with self._lock:
            if self._hot is not None and self._sqlite is not None:
                self._sqlite.disconnect(self._hot)
                self._hot = None


__all__ = ["GrantRepository", "GrantRow", "NonceStatus", "RecordedGrant"]
