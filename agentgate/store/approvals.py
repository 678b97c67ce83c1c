"""Approvals: a human signs off one exact call, once, before it expires.

An approval request is bound to a call hash (the hash of tool, arguments, chain and nonce that
the authority core computes), has an expiry and a quorum: how many distinct approvers must say
yes. Each yes is one row in ``approval_votes`` (one per approver), and the request becomes
``approved`` when the votes reach the quorum. Every state change is a conditional statement on
the row's current state, so: an approval cannot be given after the request expired (a late
approval never flips a timed-out request), an approver must differ from the requester and counts
once, and an approval is consumed once, for the call it was given for; a replay finds it already
consumed.

A request also keeps the grant ids of its call's chain (``approval_grants``, root to tip). One
whose grant, or any ancestor of it, is revoked (``agentgate_revocations``, which every process
writes) is void: no longer open, and approving, denying or using it raises ``Revoked``. That is
read when asked, so a revocation by another process or host counts at once. The revocation
itself (``Gate.revoke``, ``Gate.revoke_holder``, ``agentgate grant revoke``) also closes, in its
own transaction, the requests it makes void, as denied by ``agentgate:revoked``
(``void_standing_on``; until review R55 a void request was closed only when its call was refused
or declined, and a run never resumed left it ``pending`` until pruned); a call refused later
still finds it (``void_for``). Requests opened before grants were kept have none and are
unaffected.

The quorum and the approvers that count are the policy's in force when a vote is cast or the
approval used, not the one the request was asked under (docs/policy-reference.md, "Changing a
policy"). A caller that knows them passes a ``QuorumRule``: the request's stored quorum is set to
it, only the votes of the approvers it names are counted, and a request approved under a
smaller quorum (or by approvers since removed) is pending again until the votes that count
reach it. The approvers the request was last counted among are kept with it (``approval_counted``,
a JSON list of DIDs), so that a reader without the policy (``agentgate approval list``) shows the
votes that count; a request counted without a rule has no such row, and every vote counts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from agentgate._numbers import finite
from agentgate._shown import quoted
from agentgate._time import LATEST_EXPIRY
from agentgate.errors import Denied, Expired, InputError, MalformedRow, Revoked, StoreError
from agentgate.store._base import (
    MAX_STORED_INTEGER,
    Dialect,
    Store,
    Transaction,
    add_sqlite_columns,
    unix_time,
)
from agentgate.store.grants import GRANTS_DDL
from agentgate.store.ledger import may_be_stored

_DIALECT_FREE_DDL = """CREATE TABLE IF NOT EXISTS approval_grants (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    grant_id TEXT NOT NULL,
    PRIMARY KEY (approval_id, grant_id)
);
CREATE TABLE IF NOT EXISTS approval_counted (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    voters TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_calls (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    call_key TEXT NOT NULL,
    asked_in TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approval_calls_key ON approval_calls (call_key);
CREATE INDEX IF NOT EXISTS approval_grants_grant ON approval_grants (grant_id);
"""
"""The tables of a request written alike in both dialects (no time or counter column).
``approval_grants_grant`` is what a revocation looks a grant's requests up by
(``void_standing_on``), and what the grants' prune asks whether a request still names an
expired grant's revocation by (``GrantRepository.prune``): without it each was a scan of every
request's grants under the write lock (review R95: 0.5 s a revocation at a million requests, as
docs/operations.md's Growth and pruning measured it).
A store made before it gets it at its first writable open (``ensure_schema``) or
``agentgate store init``, schema version 4; it comes last, so that a store that also lacks
``approval_calls`` (made before review R42) is told of that table first."""

APPROVALS_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    quorum INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1),
    created REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    consumed_at REAL
);
CREATE INDEX IF NOT EXISTS approvals_call ON approvals (call_hash);
CREATE TABLE IF NOT EXISTS approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at REAL NOT NULL,
    PRIMARY KEY (approval_id, approver)
);
CREATE TABLE IF NOT EXISTS approval_asked (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    audit_index INTEGER NOT NULL
);
"""
    + _DIALECT_FREE_DDL,
    # Each CREATE ... IF NOT EXISTS of a table or index that exists is skipped, not run
    # (PostgresStore.ensure_schema), so a role without CREATE on the schema can still start.
    "postgresql": """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    quorum INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1),
    created DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    decided_at DOUBLE PRECISION,
    consumed_at DOUBLE PRECISION
);
DO $$
BEGIN
    -- A table made before ``quorum`` (2026-11-29 17:27): its owner adds it (store init); its
    -- requests needed one approver. Any other role fails here until then, naming the column.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('approvals')
                   AND attname = 'quorum' AND NOT attisdropped) THEN
        ALTER TABLE approvals ADD COLUMN quorum INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1);
    END IF;
END;
$$;
CREATE INDEX IF NOT EXISTS approvals_call ON approvals (call_hash);
CREATE TABLE IF NOT EXISTS approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (approval_id, approver)
);
CREATE TABLE IF NOT EXISTS approval_asked (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    audit_index BIGINT NOT NULL
);
"""
    + _DIALECT_FREE_DDL,
}

APPROVAL_CHILDREN = (
    "approval_votes",
    "approval_asked",
    "approval_grants",
    "approval_counted",
    "approval_calls",
)
"""The tables that hold rows of a request (``approval_id``), forgotten with it."""

SUPERSEDED = "agentgate:superseded"
"""Who closed a request whose call was changed and asked for again (``supersede``), or that
expired still open before its call was asked for again (``supersede_expired``)."""

VOIDED = "agentgate:revoked"
"""Who closed a void request (a grant of its call revoked): the revocation (``void_standing_on``),
or the refusal of its call (``void``)."""

REFUSED = "agentgate:refused"
"""Who closed a request when its call was refused: still open (``Gate``'s refusal of the call
asked), or expired (``close_expired_for``: with the grant chain it was asked under, say)."""


def how_closed(request: Approval) -> str | None:
    """How ``request`` was closed (declined, void, superseded or by its call's refusal), in words
    that follow "the request" in a refusal, or ``None`` when it is not closed: ``Gate.approve``
    and ``approval sign --store`` say it alike (review R72: each wrote its own)."""
    if request.state != "denied":
        return None
    if request.approver == VOIDED:
        return "is void (a grant of its call was revoked): nothing waits for it"
    if request.approver == SUPERSEDED:
        return (
            "was closed as superseded (its call was changed, or it expired, and the call was asked for "
            "again): sign the new request"
        )
    if request.approver == REFUSED:
        return (
            "was closed when its call was refused (a grant of its chain expired, say): nothing waits "
            "for it; a call made again under a new grant is asked for under a new request"
        )
    return "was declined: nothing waits for it"


_IDS_PER_READ = 500
"""Request ids bound in one statement by ``ApprovalStore.votes_of`` (within every driver's limit)."""

_UNREVOKED = (
    "NOT EXISTS (SELECT 1 FROM approval_grants g JOIN agentgate_revocations r ON r.grant_id = g.grant_id "
    "WHERE g.approval_id = {})"
)
"""The condition that no grant of the request whose id is ``{}`` (a column or ``?``) is revoked."""


_KEYED_TO_CALL = (
    "AND NOT EXISTS (SELECT 1 FROM approval_calls c WHERE c.approval_id = a.id AND c.call_key <> ?) "
)
"""The condition that request ``a`` is keyed to the framework call ``?`` or to none."""


@dataclass(frozen=True)
class Approval:
    """One approval request and where it stands. Times are Unix seconds."""

    id: str
    call_hash: str
    requester: str
    state: str
    approver: str | None
    """The approver whose yes completed the quorum (or who denied), once decided."""
    expires_at: float
    quorum: int = 1


@dataclass(frozen=True)
class QuorumRule:
    """The approval rule in force: ``quorum`` distinct approvers among ``voters`` (their DIDs)."""

    quorum: int
    voters: frozenset[str]

    def counted(self) -> tuple[str, tuple[object, ...]]:
        """A SQL condition on ``approval_votes.approver`` that keeps the votes that count, and its
        parameters."""
        if not self.voters:
            return "1 = 0", ()
        ordered = tuple(sorted(self.voters))
        return f"approver IN ({', '.join('?' * len(ordered))})", ordered


def _may_be_request_id(approval_id: object) -> TypeGuard[str]:
    """Whether ``approval_id`` is text that a stored id may be (``ledger.may_be_stored``: no NUL
    character nor lone surrogate); no request has any other."""
    return isinstance(approval_id, str) and may_be_stored(approval_id)


def _request_id(approval_id: object) -> str:
    """``approval_id`` as a request's id (``_may_be_request_id``); else ``InputError``, as for an
    id no request has. Until review R93 a list was a ``StoreError`` about the parameter's type and
    a lone surrogate a ``StoreError`` too: to a caller that fails closed, the store failing."""
    if not _may_be_request_id(approval_id):
        raise InputError(f"no approval request {quoted(approval_id, 60)}")
    return approval_id


class ApprovalStore:
    """Approval requests and decisions, shared by every process on the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The revocation table is read here (a void request): made if this store has none yet.
        store.ensure_schema("grants", GRANTS_DDL)
        store.ensure_schema("approvals", APPROVALS_DDL)
        if store.dialect == "sqlite" and not getattr(store, "read_only", False):
            # Added 2026-11-29 17:27 (commit 843da025): earlier requests needed one approver.
            add_sqlite_columns(
                store, "approvals", {"quorum": "INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1)"}
            )

    def _run(self, tx: Transaction | None, sql: str, params: tuple[object, ...]) -> int:
        if tx is not None:
            tx.execute(sql, params)
            return tx.rowcount
        with self.store.transaction() as own:
            own.execute(sql, params)
            return own.rowcount

    def request(
        self,
        call_hash: str,
        requester: str,
        expires_at: float,
        *,
        quorum: int = 1,
        grants: Sequence[str] = (),
        voters: Collection[str] | None = None,
        call_key: tuple[str, str] | None = None,
        tx: Transaction | None = None,
    ) -> str:
        """Open a request for the call ``call_hash`` that ``quorum`` distinct approvers must approve.

        ``grants``: the grant ids of the call's chain, root to tip, kept with the request in the
        same transaction; the request is void once any of them is revoked. ``voters``: the DIDs
        of the approvers whose votes count (the policy's), when known. ``call_key``: what names
        the framework's call whatever its tool and arguments (``approval_call_key``), and the
        version of what asked for it (a model answer), for ``supersede``. Returns its id.
        ``InputError`` on empty values, a quorum below one or above 2**63 - 1 (what the stores'
        integers hold; a policy's is at most 1000: until review R88's third regression pass a
        larger one was a ``StoreError`` about an integer out of range, naming no quorum), or an expiry that is no finite time
        (``unix_time``: until review R63 ``float(nan)`` was stored, a request that never expires
        on PostgreSQL, which sorts NaN above every time; reads refuse such a row) or lies
        outside 1970 to ``LATEST_EXPIRY`` (the year 5138), the times ``approval sign`` signs:
        until review R83 an expiry of ``1e300`` was stored, which ``approval list`` showed as
        none (``-``) and ``approval sign`` refused as malformed.
        """
        expires = unix_time(expires_at, "an approval request's expires_at")
        if not 0 <= expires < LATEST_EXPIRY:
            raise InputError(
                f"an approval request's expires_at must be a time in Unix seconds from 0 to "
                f"{LATEST_EXPIRY} (the year 5138), got {quoted(expires_at, 40)}"
            )
        if not call_hash or not requester:
            raise InputError("an approval request needs a call hash and a requester")
        if not isinstance(quorum, int) or isinstance(quorum, bool) or quorum < 1:
            raise InputError(f"an approval quorum is a whole number >= 1, got {quoted(quorum, 60)}")
        if quorum > MAX_STORED_INTEGER:
            raise InputError(
                f"an approval quorum is at most 2**63 - 1 (what a store's integer holds), got {quoted(quorum, 60)}"
            )
        approval_id = uuid.uuid4().hex
        with self.store.within(tx) as t:
            t.execute(
                "INSERT INTO approvals (id, call_hash, requester, state, quorum, created, expires_at) "
                "VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                (approval_id, call_hash, requester, quorum, time.time(), expires),
            )
            if grants:
                t.executemany(
                    "INSERT INTO approval_grants (approval_id, grant_id) VALUES (?, ?) "
                    "ON CONFLICT DO NOTHING",
                    [(approval_id, grant) for grant in grants],
                )
            if voters is not None:
                self._counted_among(t, approval_id, voters)
            if call_key is not None:
                t.execute(
                    "INSERT INTO approval_calls (approval_id, call_key, asked_in) VALUES (?, ?, ?)",
                    (approval_id, *call_key),
                )
        return approval_id

    def keep_call(
        self, approval_id: str, call_key: tuple[str, str], *, tx: Transaction | None = None
    ) -> None:
        """Key request ``approval_id`` to the framework call ``call_key`` (as ``request`` does) if
        it has no key yet: one asked by a version before ``approval_calls`` existed, asked again
        by this one, is then closed like any when its call is edited (``supersede``)."""
        self._run(
            tx,
            "INSERT INTO approval_calls (approval_id, call_key, asked_in) VALUES (?, ?, ?) "
            "ON CONFLICT (approval_id) DO NOTHING",
            (approval_id, *call_key),
        )

    def supersede(
        self, call_key: tuple[str, str], *, now: float | None = None, tx: Transaction | None = None
    ) -> list[tuple[str, str, int | None]]:
        """Close, as denied by ``agentgate:superseded``, the open requests (pending, or approved
        and not used) for the framework's call ``call_key[0]`` that were asked in another version
        of what asked for it than ``call_key[1]``: the call was changed (the model answer edited in
        the run's state) and asked for again, and no run will make the call they were asked for.
        (Two calls of one answer that share an id are asked in the same version: neither closes
        the other's request.) Returns each one's id, call hash and the index of its
        ``approval_required`` entry (``None`` when it was not recorded), oldest first."""
        return self._close_superseded("AND c.asked_in <> ? ", call_key, now, tx)

    def close_call(
        self, call_key: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> list[tuple[str, str, int | None]]:
        """Close, as ``supersede`` does, every request still open for the framework's call
        ``call_key``, whatever version asked it: the call, as it stands now, was refused (an edit
        the policy or the grant refuses is refused before anyone is asked, so ``supersede`` never
        runs), and no run will make the calls those requests name. Until review R61 they stayed
        pending, listed to approvers, until they expired. Returns as ``supersede``."""
        return self._close_superseded("", (call_key,), now, tx)

    def supersede_expired(
        self, call_key: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> list[tuple[str, str, int | None]]:
        """Close, as ``supersede`` does, the requests keyed to the framework's call ``call_key``
        that expired while still open (pending, or approved and not used), whatever version asked
        them: the call is asked for again under a new request, which supersedes them. A request
        lasts no longer than the grant chain it was asked under, so a sub-agent's call resumed
        after its delegated grant expired is asked for again under a fresh grant (another call
        hash): until review R96's regression review the old request stayed ``pending`` for good,
        its ``approval_required`` entry never answered. Returns as ``supersede``."""
        return self._close_superseded("", (call_key,), now, tx, expired=True)

    def _close_superseded(
        self,
        versions: str,
        params: tuple[str, ...],
        now: float | None,
        tx: Transaction | None,
        *,
        expired: bool = False,
    ) -> list[tuple[str, str, int | None]]:
        """Close, as denied by ``agentgate:superseded``, the open requests keyed to the call
        ``params[0]`` (and the further condition ``versions`` on ``c.asked_in`` with the rest of
        ``params``), unexpired ones or (``expired``) expired ones: ``supersede``, ``close_call``
        and ``supersede_expired``."""
        now = time.time() if now is None else now
        deadline = "a.expires_at <= ?" if expired else "a.expires_at > ?"
        with self.store.within(tx) as t:
            rows = t.execute(
                "SELECT a.id, a.call_hash, k.audit_index FROM approval_calls c "
                "JOIN approvals a ON a.id = c.approval_id "
                "LEFT JOIN approval_asked k ON k.approval_id = a.id "
                f"WHERE c.call_key = ? {versions}AND a.state IN ('pending', 'approved') "
                f"AND {deadline} ORDER BY a.created, a.id",
                (*params, now),
            )
            closed: list[tuple[str, str, int | None]] = []
            for approval_id, old_hash, index in rows:
                t.execute(
                    "UPDATE approvals SET state = 'denied', approver = ?, "
                    "decided_at = ? WHERE id = ? AND state IN ('pending', 'approved')",
                    (SUPERSEDED, now, approval_id),
                )
                if t.rowcount:
                    closed.append((str(approval_id), str(old_hash), None if index is None else int(index)))
        return closed

    def _counted_among(self, tx: Transaction, approval_id: str, voters: Collection[str]) -> None:
        """Keep ``voters`` as the approvers request ``approval_id`` is counted among."""
        tx.execute(
            "INSERT INTO approval_counted (approval_id, voters) VALUES (?, ?) "
            "ON CONFLICT (approval_id) DO UPDATE SET voters = excluded.voters",
            (approval_id, json.dumps(sorted(voters))),
        )

    def asked(self, approval_id: str, audit_index: int, *, tx: Transaction | None = None) -> None:
        """Record the index of the request's ``approval_required`` audit entry (``open_for``)."""
        self._run(
            tx,
            "INSERT INTO approval_asked (approval_id, audit_index) VALUES (?, ?)",
            (approval_id, audit_index),
        )

    def asked_index(self, approval_id: str, call_hash: str, *, tx: Transaction | None = None) -> int | None:
        """The index of the ``approval_required`` entry of request ``approval_id``, if it was
        recorded and the request is for the call ``call_hash``; else ``None``."""
        sql = (
            "SELECT k.audit_index FROM approval_asked k JOIN approvals a ON a.id = k.approval_id "
            "WHERE k.approval_id = ? AND a.call_hash = ?"
        )
        rows = (
            tx.execute(sql, (approval_id, call_hash))
            if tx is not None
            else self.store.query(sql, (approval_id, call_hash))
        )
        return int(rows[0][0]) if rows else None

    def open_for(
        self,
        call_hash: str,
        requester: str,
        *,
        call_key: str | None = None,
        now: float | None = None,
        tx: Transaction | None = None,
    ) -> tuple[str, int | None, float] | None:
        """The newest request for the call ``call_hash`` by ``requester`` that is still open
        (pending or approved, not used, not expired, no grant revoked): its id, the index of its
        ``approval_required`` audit entry (``None`` when it was not recorded) and its expiry.
        With ``call_key`` (``approval_call_key``: the framework call, its run included), only a
        request keyed to that call or to none: the same call hash asked in another run (another
        LangGraph thread) is another call, with a request of its own.

        A process that asks again for a call another process (or itself before a restart) asked
        for finds the request there, instead of opening a second one for the same call.
        """
        keyed = "" if call_key is None else _KEYED_TO_CALL
        sql = (
            "SELECT a.id, k.audit_index, a.expires_at FROM approvals a "
            "LEFT JOIN approval_asked k ON k.approval_id = a.id "
            "WHERE a.call_hash = ? AND a.requester = ? AND a.state IN ('pending', 'approved') "
            f"AND a.expires_at > ? AND {_UNREVOKED.format('a.id')} {keyed}"
            "ORDER BY a.created DESC, a.id LIMIT 1"
        )
        params: tuple[object, ...] = (call_hash, requester, time.time() if now is None else now)
        if call_key is not None:
            params = (*params, call_key)
        rows = tx.execute(sql, params) if tx is not None else self.store.query(sql, params)
        if not rows:
            return None
        approval_id, index, expires_at = rows[0]
        return str(approval_id), None if index is None else int(index), _expiry(approval_id, expires_at)

    def asked_call(self, approval_id: str, *, tx: Transaction | None = None) -> tuple[str, str] | None:
        """The framework call request ``approval_id`` is keyed to and the version that asked it
        (``request``'s ``call_key``), or ``None`` when it is keyed to none."""
        sql = "SELECT call_key, asked_in FROM approval_calls WHERE approval_id = ?"
        rows = tx.execute(sql, (approval_id,)) if tx is not None else self.store.query(sql, (approval_id,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def used(self, approval_id: str, call_hash: str, *, tx: Transaction | None = None) -> bool:
        """Whether request ``approval_id``, for the call ``call_hash``, was used (consumed)."""
        sql = "SELECT 1 FROM approvals WHERE id = ? AND call_hash = ? AND state = 'consumed'"
        params = (approval_id, call_hash)
        return bool(tx.execute(sql, params) if tx is not None else self.store.query(sql, params))

    def call_of(self, approval_id: str, *, tx: Transaction | None = None) -> tuple[str, str | None] | None:
        """The call hash request ``approval_id`` was asked for (it never changes once asked) and
        the framework call it is keyed to (``request``'s ``call_key``, ``keep_call``; ``None``
        when it is keyed to none), read at once; ``None`` when there is no such request (an id no
        request may have included)."""
        if not _may_be_request_id(approval_id):
            return None
        sql = (
            "SELECT a.call_hash, c.call_key FROM approvals a "
            "LEFT JOIN approval_calls c ON c.approval_id = a.id WHERE a.id = ?"
        )
        rows = tx.execute(sql, (approval_id,)) if tx is not None else self.store.query(sql, (approval_id,))
        if not rows:
            return None
        call_hash, call_key = rows[0]
        return str(call_hash), None if call_key is None else str(call_key)

    def void_standing_on(
        self, grant_ids: Collection[str], *, now: float | None = None, tx: Transaction | None = None
    ) -> list[tuple[str, str, int | None]]:
        """Close, as denied by ``agentgate:revoked``, the open requests (pending, or approved and
        not used; not expired) whose call's chain holds one of ``grant_ids``, which the caller
        has just revoked in ``tx``: a request of a grant below one of them holds it too (its chain,
        root to tip, is kept whole). Returns each one's id, the revoked grant it stands on (the
        first of ``grant_ids`` by id) and the index of its ``approval_required`` entry (``None``
        when it was not recorded), oldest first."""
        now = time.time() if now is None else now
        revoked = sorted(set(grant_ids))
        closed: list[tuple[str, str, int | None]] = []
        with self.store.within(tx) as t:
            for at in range(0, len(revoked), _IDS_PER_READ):
                chunk = tuple(revoked[at : at + _IDS_PER_READ])
                rows = t.execute(
                    "SELECT a.id, min(g.grant_id), k.audit_index FROM approvals a "
                    "JOIN approval_grants g ON g.approval_id = a.id "
                    "LEFT JOIN approval_asked k ON k.approval_id = a.id "
                    f"WHERE g.grant_id IN ({', '.join('?' * len(chunk))}) "
                    "AND a.state IN ('pending', 'approved') AND a.expires_at > ? "
                    "GROUP BY a.id, k.audit_index, a.created ORDER BY a.created, a.id",
                    (*chunk, now),
                )
                for approval_id, grant_id, index in rows:
                    if self.void(str(approval_id), now=now, tx=t):
                        closed.append(
                            (str(approval_id), str(grant_id), None if index is None else int(index))
                        )
        return closed

    def void_for(
        self,
        call_hash: str,
        requester: str,
        *,
        call_key: str | None = None,
        now: float | None = None,
        tx: Transaction | None = None,
    ) -> tuple[str, int | None] | None:
        """Close, as denied by ``agentgate:revoked``, the void requests for the call ``call_hash``
        by ``requester``: not used, not expired, and standing on a revoked grant (which ``open_for``
        leaves out). For a call refused because of that revocation: its request is settled with the
        refusal instead of staying ``pending`` in the table for good. A request the revocation
        closed already (``void_standing_on``) is found too, so the refusal still refers to it.
        Returns the newest one's id and the index of its ``approval_required`` entry (``None``
        when it was not recorded), or ``None`` when there is none. ``call_key``: only the
        requests of that framework call, as ``open_for``'s."""
        now = time.time() if now is None else now
        keyed = "" if call_key is None else _KEYED_TO_CALL
        params: tuple[object, ...] = (call_hash, requester, VOIDED, now)
        if call_key is not None:
            params = (*params, call_key)
        with self.store.within(tx) as t:
            rows = t.execute(
                "SELECT a.id, k.audit_index FROM approvals a "
                "LEFT JOIN approval_asked k ON k.approval_id = a.id "
                "WHERE a.call_hash = ? AND a.requester = ? "
                "AND (a.state IN ('pending', 'approved') OR (a.state = 'denied' AND a.approver = ?)) "
                f"AND a.expires_at > ? AND NOT {_UNREVOKED.format('a.id')} {keyed}"
                "ORDER BY a.created DESC, a.id",
                params,
            )
            for approval_id, _ in rows:
                self.void(str(approval_id), now=now, tx=t)
        if not rows:
            return None
        newest, index = rows[0]
        return str(newest), None if index is None else int(index)

    def void(self, approval_id: str, *, now: float | None = None, tx: Transaction | None = None) -> bool:
        """Close request ``approval_id`` as denied by ``agentgate:revoked`` if it is void: open
        (pending, or approved and not used), not expired, and a grant of its call revoked. Returns
        whether it was closed; after that ``approve``, ``deny`` and ``consume`` raise ``Revoked``
        for it, as before."""
        now = time.time() if now is None else now
        return (
            self._run(
                tx,
                "UPDATE approvals SET state = 'denied', approver = ?, decided_at = ? "
                "WHERE id = ? AND state IN ('pending', 'approved') AND expires_at > ? "
                f"AND NOT {_UNREVOKED.format('?')}",
                (VOIDED, now, approval_id, now, approval_id),
            )
            == 1
        )

    def approve(
        self,
        approval_id: str,
        approver: str,
        *,
        call_hash: str | None = None,
        now: float | None = None,
        tx: Transaction | None = None,
        rule: QuorumRule | None = None,
    ) -> None:
        """Record ``approver``'s yes on a pending, unexpired request; it is approved at its quorum
        (``rule``'s, counting its voters only, when given).

        Raises ``Expired`` if the request has expired, ``Revoked`` if a grant of its call is revoked,
        ``Denied`` if the approver is the requester, has already approved it, or the request was
        denied or used, ``InputError`` if there is no such request. A request approved and not yet
        used still takes a vote (one more approver on record; under a ``rule`` that has since
        raised the quorum, one it needs). With ``call_hash``, the yes counts only if the request
        is for that call; a request for another call is refused (``Denied``) before anything of it
        is written, ``rule``'s quorum and voters included.
        """
        approval_id = _request_id(approval_id)
        now = time.time() if now is None else now
        if tx is None:
            with self.store.transaction() as own:
                self.approve(approval_id, approver, call_hash=call_hash, now=now, tx=own, rule=rule)
            return
        asked = self.call_of(approval_id, tx=tx) if call_hash is not None else None
        if call_hash is not None and (asked is None or asked[0] != call_hash):
            # Refused before ``_retally``: until review R93 another call's request was brought to
            # this call's rule (quorum, counted voters, state), and a caller that caught the
            # refusal (a vote not counted) committed that.
            self._explain(tx, approval_id, now, approver=approver, call_hash=call_hash)
        # The request's row first (an update: PostgreSQL locks the row, SQLite's write lock is
        # held already): two approvers voting at once are then taken one after the other, and the
        # second's count sees the first's vote. Each counting only its own, at READ COMMITTED,
        # left a request of quorum 2 pending for good with both votes in. Under ``rule`` the update
        # also brings the request to the policy in force.
        if rule is None:
            self._run(
                tx, "UPDATE approvals SET state = state WHERE id = ? AND state = 'pending'", (approval_id,)
            )
        else:
            self._retally(tx, approval_id, rule)
        voted = self._run(
            tx,
            "INSERT INTO approval_votes (approval_id, approver, decided_at) "
            "SELECT id, ?, ? FROM approvals WHERE id = ? AND state IN ('pending', 'approved') AND expires_at > ? "
            f"AND requester <> ? AND call_hash = coalesce(?, call_hash) AND {_UNREVOKED.format('?')} "
            "ON CONFLICT DO NOTHING",
            (approver, now, approval_id, now, approver, call_hash, approval_id),
        )
        if voted != 1:
            self._explain(tx, approval_id, now, approver=approver, call_hash=call_hash or "")
        where, among = rule.counted() if rule is not None else ("1 = 1", ())
        self._run(
            tx,
            "UPDATE approvals SET state = 'approved', approver = ?, decided_at = ? "
            "WHERE id = ? AND state = 'pending' "
            f"AND (SELECT count(*) FROM approval_votes WHERE approval_id = ? AND {where}) >= quorum",
            (approver, now, approval_id, approval_id, *among),
        )

    def _retally(self, tx: Transaction, approval_id: str, rule: QuorumRule) -> None:
        """Set an open request's quorum to ``rule``'s and its state to what the votes that count
        under ``rule`` make it: approved at the quorum, else pending."""
        where, among = rule.counted()
        # The row lock first, in a statement of its own: at READ COMMITTED (PostgreSQL) a
        # statement's subquery reads the snapshot taken before it waited for the lock, so a vote
        # committed meanwhile would be missed and an approved request set back to pending.
        self._run(tx, "UPDATE approvals SET state = state WHERE id = ?", (approval_id,))
        self._run(
            tx,
            "UPDATE approvals SET quorum = ?, state = CASE WHEN "
            f"(SELECT count(*) FROM approval_votes WHERE approval_id = ? AND {where}) >= ? "
            "THEN 'approved' ELSE 'pending' END WHERE id = ? AND state IN ('pending', 'approved')",
            (rule.quorum, approval_id, *among, rule.quorum, approval_id),
        )
        if tx.rowcount:  # an open request: counted among ``rule``'s voters from now on
            self._counted_among(tx, approval_id, rule.voters)

    def deny(
        self, approval_id: str, approver: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> None:
        """Refuse a pending request: one approver's no closes it, whatever the quorum.

        Same rules and errors as ``approve``.
        """
        approval_id = _request_id(approval_id)
        now = time.time() if now is None else now
        changed = self._run(
            tx,
            "UPDATE approvals SET state = 'denied', approver = ?, decided_at = ? "
            "WHERE id = ? AND state = 'pending' AND expires_at > ? AND requester <> ? "
            f"AND {_UNREVOKED.format('?')}",
            (approver, now, approval_id, now, approver, approval_id),
        )
        if changed != 1:
            self._explain(tx, approval_id, now, approver=approver)

    def close_expired(
        self, approval_id: str, approver: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> bool:
        """Close request ``approval_id`` as denied by ``approver`` if it expired while still open
        (pending, or approved and not used): what ``Gate.decline`` records of a request nobody
        answered in time, so that it is answered once, and a second decline is refused as any
        decided request's (``deny`` raises ``Denied``). Returns whether it was closed. Until review
        R82 an expired request stayed ``pending`` for good, and each decline wrote another ``deny``."""
        now = time.time() if now is None else now
        return (
            self._run(
                tx,
                "UPDATE approvals SET state = 'denied', approver = ?, decided_at = ? "
                "WHERE id = ? AND state IN ('pending', 'approved') AND expires_at <= ?",
                (approver, now, approval_id, now),
            )
            == 1
        )

    def close_expired_for(
        self,
        call_hash: str,
        requester: str,
        approver: str,
        *,
        call_key: str | None = None,
        now: float | None = None,
        tx: Transaction | None = None,
    ) -> tuple[str, int | None] | None:
        """Close, as denied by ``approver`` (``close_expired``), the newest request for the call
        ``call_hash`` by ``requester`` that expired while still open, keyed as ``open_for``'s
        (``call_key``): for a call refused after its request expired, which ``open_for`` no longer
        finds. Returns its id and the index of its ``approval_required`` entry (``None`` when it
        was not recorded), or ``None`` when there is none. A request lasts no longer than the grant
        chain it was asked under, so a run paused for an approval and resumed after its own grant
        expired is refused with its request expired: until review R96's regression review that
        request stayed ``pending`` for good, and the refusal referred to nothing."""
        now = time.time() if now is None else now
        keyed = "" if call_key is None else _KEYED_TO_CALL
        params: tuple[object, ...] = (call_hash, requester, now)
        if call_key is not None:
            params = (*params, call_key)
        with self.store.within(tx) as t:
            rows = t.execute(
                "SELECT a.id, k.audit_index FROM approvals a "
                "LEFT JOIN approval_asked k ON k.approval_id = a.id "
                "WHERE a.call_hash = ? AND a.requester = ? AND a.state IN ('pending', 'approved') "
                f"AND a.expires_at <= ? {keyed}ORDER BY a.created DESC, a.id LIMIT 1",
                params,
            )
            if not rows or not self.close_expired(str(rows[0][0]), approver, now=now, tx=t):
                return None
        approval_id, index = rows[0]
        return str(approval_id), None if index is None else int(index)

    def consume(
        self,
        approval_id: str,
        call_hash: str,
        *,
        now: float | None = None,
        tx: Transaction | None = None,
        rule: QuorumRule | None = None,
    ) -> tuple[str, ...]:
        """Use an approval for the call ``call_hash``, once; returns the ids of the approvers that
        count (``rule``'s voters, when given), sorted.

        Raises ``Denied`` if it is not approved (under ``rule``, when given), was already used, or
        was given for another call; ``Expired`` if it has expired; ``Revoked`` if a grant of its
        call is revoked; ``InputError`` if there is no such approval.
        """
        approval_id = _request_id(approval_id)
        now = time.time() if now is None else now
        if rule is not None:
            if tx is None:
                with self.store.transaction() as own:
                    return self.consume(approval_id, call_hash, now=now, tx=own, rule=rule)
            self._retally(tx, approval_id, rule)
        changed = self._run(
            tx,
            "UPDATE approvals SET state = 'consumed', consumed_at = ? "
            "WHERE id = ? AND call_hash = ? AND state = 'approved' AND expires_at > ? "
            f"AND {_UNREVOKED.format('?')}",
            (now, approval_id, call_hash, now, approval_id),
        )
        if changed != 1:
            self._explain(tx, approval_id, now, call_hash=call_hash)
        return self.approvers(approval_id, tx=tx, rule=rule)

    def rearm(self, approval_id: str, call_hash: str, *, tx: Transaction | None = None) -> bool:
        """Put a consumed request for the call ``call_hash`` back to pending, its votes cleared.

        For a call that its approval let run but that paused before completing (LangGraph re-runs
        the node on resume): the approvals replayed then are counted again, for this call only,
        until the request expires. Returns whether a consumed request was re-armed.
        """
        rearmed = self._run(
            tx,
            "UPDATE approvals SET state = 'pending', approver = NULL, decided_at = NULL, "
            "consumed_at = NULL WHERE id = ? AND call_hash = ? AND state = 'consumed'",
            (approval_id, call_hash),
        )
        if rearmed:
            self._run(tx, "DELETE FROM approval_votes WHERE approval_id = ?", (approval_id,))
        return rearmed == 1

    def approvers(
        self, approval_id: str, *, tx: Transaction | None = None, rule: QuorumRule | None = None
    ) -> tuple[str, ...]:
        """Who has approved the request so far (among ``rule``'s voters, when given), sorted."""
        where, among = rule.counted() if rule is not None else ("1 = 1", ())
        sql = f"SELECT approver FROM approval_votes WHERE approval_id = ? AND {where} ORDER BY approver"
        params = (approval_id, *among)
        rows = tx.execute(sql, params) if tx is not None else self.store.query(sql, params)
        return tuple(str(r[0]) for r in rows)

    def _read(self, tx: Transaction | None, approval_id: str) -> Approval:
        return self.get(approval_id) if tx is None else self._get(tx, approval_id)

    def _explain(
        self, tx: Transaction | None, approval_id: str, now: float, *, approver: str = "", call_hash: str = ""
    ) -> None:
        record = self._read(tx, approval_id)
        if call_hash and record.call_hash != call_hash:
            raise Denied(f"approval {approval_id} was given for another call")
        if record.state == "consumed":
            raise Denied(f"approval {approval_id} was already used")
        if record.state == "denied":
            # Decided before it expired: said as such, never as expired. A caller that lets an
            # expired request be closed (``Gate.decline``) would otherwise record a second refusal
            # of a request the log already shows refused.
            if record.approver == VOIDED:
                grant = self._revoked_grant(tx, approval_id) or "of its call"
                raise Revoked(f"approval request {approval_id} is void: grant {grant} was revoked")
            if record.approver == SUPERSEDED:
                raise Denied(
                    f"approval {approval_id} is denied: superseded, its call was changed and asked "
                    "for again under a new request"
                )
            raise Denied(f"approval {approval_id} is denied")
        # Expired before void: an expired request is over whatever its grants became, and a
        # caller that closes an expired request (``Gate.decline``) must be told so. Until review
        # R56 one also void (a revocation written straight into the store) was refused as void,
        # which ``Gate.decline`` cannot settle once it expired: the request stayed unanswered.
        if record.expires_at <= now:
            raise Expired(f"approval {approval_id} expired")
        revoked = self._revoked_grant(tx, approval_id) if record.state in ("pending", "approved") else None
        if revoked is not None:
            raise Revoked(f"approval request {approval_id} is void: grant {revoked} was revoked")
        if approver and record.requester == approver:
            raise Denied("the approver must not be the requester")
        if (
            approver
            and record.state in ("pending", "approved")
            and approver in self.approvers(approval_id, tx=tx)
        ):
            raise Denied(f"{approver} has already approved request {approval_id}; each approver counts once")
        raise Denied(f"approval {approval_id} is {record.state}")

    def revoked_grant(self, approval_id: str) -> str | None:
        """A revoked grant of request ``approval_id``'s call (the first by id), or ``None``: one
        there is makes the request void (``agentgate approval sign --store`` refuses to sign it)."""
        return self._revoked_grant(None, approval_id)

    def _revoked_grant(self, tx: Transaction | None, approval_id: str) -> str | None:
        """A revoked grant of the request's call (the first by id), or ``None``."""
        sql = (
            "SELECT g.grant_id FROM approval_grants g "
            "JOIN agentgate_revocations r ON r.grant_id = g.grant_id "
            "WHERE g.approval_id = ? ORDER BY g.grant_id LIMIT 1"
        )
        rows = tx.execute(sql, (approval_id,)) if tx is not None else self.store.query(sql, (approval_id,))
        return str(rows[0][0]) if rows else None

    def prune(self, before: float, *, tx: Transaction | None = None) -> int:
        """Forget the requests that expired before ``before`` (Unix seconds), whatever their
        state, with their votes and links; returns how many. An expired request can no longer
        be approved, denied or used, and the audit log keeps what happened to it. In ``tx`` when
        given (``agentgate store prune`` prunes every part in one), else in a transaction of its
        own. ``InputError`` for a ``before`` that is not a finite number (until review R57, NaN
        forgot every request on PostgreSQL and none on SQLite)."""
        before = unix_time(before, "the approval requests' prune time")
        with self.store.within(tx) as work:
            old = "SELECT id FROM approvals WHERE expires_at < ?"
            for child in APPROVAL_CHILDREN:
                work.execute(f"DELETE FROM {child} WHERE approval_id IN ({old})", (before,))
            work.execute("DELETE FROM approvals WHERE expires_at < ?", (before,))
            return work.rowcount

    def get(self, approval_id: str, *, tx: Transaction | None = None) -> Approval:
        """One request; ``InputError`` if there is none. ``tx``: the caller's transaction, read in
        (none opened beside it: on PostgreSQL that would be a second pool connection)."""
        approval_id = _request_id(approval_id)
        if tx is not None:
            return self._get(tx, approval_id)
        with self.store.transaction(immediate=False) as own:
            return self._get(own, approval_id)

    def _get(self, tx: Transaction, approval_id: str) -> Approval:
        rows = tx.execute(
            "SELECT call_hash, requester, state, approver, expires_at, quorum FROM approvals WHERE id = ?",
            (approval_id,),
        )
        if not rows:
            raise InputError(f"no approval request {quoted(approval_id, 60)}")
        return _approval((approval_id, *rows[0]))

    def open_records(self, now: float | None = None) -> list[Approval]:
        """Requests still waiting for votes (pending, not expired, no grant revoked), oldest first."""
        moment = time.time() if now is None else now
        rows = self.store.query(
            "SELECT id, call_hash, requester, state, approver, expires_at, quorum FROM approvals "
            f"WHERE state = 'pending' AND expires_at > ? AND {_UNREVOKED.format('approvals.id')} "
            "ORDER BY created, id",
            (moment,),
        )
        return [_approval(row) for row in rows]

    def votes(self, approval_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The approvers who voted yes on the request, sorted, in two groups: those whose vote
        counts (among the voters it was last counted against, or all when it has none on record)
        and those whose vote no longer does (a key the policy in force no longer names)."""
        return self.votes_of([approval_id])[approval_id]

    def counted_among(self, approval_id: str) -> frozenset[str] | None:
        """The DIDs of the approvers request ``approval_id`` was last counted among (``None``: it
        has none on record, and every vote counts): a yes of a key outside them does not count
        under the policy the request was last counted under (``agentgate approval sign --store``)."""
        rows = self.store.query("SELECT voters FROM approval_counted WHERE approval_id = ?", (approval_id,))
        return frozenset(_voters(approval_id, str(rows[0][0]))) if rows else None

    def votes_of(self, approval_ids: Sequence[str]) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """``votes`` of each request of ``approval_ids``, read in two statements per
        ``_IDS_PER_READ`` requests (``agentgate approval list`` on a long list)."""
        given: dict[str, list[str]] = {i: [] for i in approval_ids}
        counted: dict[str, set[str]] = {}
        for at in range(0, len(approval_ids), _IDS_PER_READ):
            chunk = tuple(approval_ids[at : at + _IDS_PER_READ])
            among = ", ".join("?" * len(chunk))
            for approval_id, approver in self.store.query(
                f"SELECT approval_id, approver FROM approval_votes WHERE approval_id IN ({among}) "
                "ORDER BY approver",
                chunk,
            ):
                given[str(approval_id)].append(str(approver))
            for approval_id, voters in self.store.query(
                f"SELECT approval_id, voters FROM approval_counted WHERE approval_id IN ({among})", chunk
            ):
                counted[str(approval_id)] = _voters(str(approval_id), str(voters))
        found: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for approval_id, votes in given.items():
            voters = counted.get(approval_id)
            if voters is None:
                found[approval_id] = (tuple(votes), ())
            else:
                found[approval_id] = (
                    tuple(v for v in votes if v in voters),
                    tuple(v for v in votes if v not in voters),
                )
        return found


def _approval(row: Sequence[object]) -> Approval:
    """A row of ``approvals`` (id, call hash, requester, state, approver, expiry, quorum) as an
    ``Approval``; ``StoreError`` naming the table, the request and the column when its quorum is
    no whole number >= 1 or its expiry no number of Unix seconds (``_expiry``), never a
    traceback: SQLite's checks let text through (``'x' >= 1`` holds: text sorts above every
    number). Values quoted cut at 60 characters, as ``ledger.stored_reservation`` quotes a
    reservation's. Until review R63 ``int`` and ``float`` raised ``ValueError`` out of
    ``agentgate approval list``."""
    approval_id, call_hash, requester, state, approver, expires_at, quorum = row
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        raise _malformed(approval_id, f"its quorum is {quorum!r:.60}, not a whole number >= 1")
    return Approval(
        str(approval_id),
        str(call_hash),
        str(requester),
        str(state),
        None if approver is None else str(approver),
        _expiry(approval_id, expires_at),
        quorum,
    )


def _expiry(approval_id: object, expires_at: object) -> float:
    """A row's ``expires_at`` as Unix seconds; ``StoreError`` naming the request when it is none:
    text (SQLite's checks let it through), NaN or an infinity (PostgreSQL's DOUBLE PRECISION and
    SQLite's REAL hold them; NaN and infinity sort above every time, a request that never expires;
    ``request`` writes none of them, ``unix_time``). Every read of a request's expiry
    (``_approval``, ``open_for``) goes through it: until review R82 an infinity was read as a
    request that never expires (``approval list`` showed it open, with no expiry), and
    ``open_for`` read its expiry with ``float`` alone."""
    if not finite(expires_at):
        raise _malformed(approval_id, f"its expires_at is {expires_at!r:.60}, not a time in Unix seconds")
    return float(expires_at)


def _malformed(approval_id: object, what: str) -> MalformedRow:
    """The error for a malformed row of ``approvals``, naming the request (quoted cut)."""
    return MalformedRow(f"approvals: the row of request {approval_id!r:.60} is malformed: {what}")


def _voters(approval_id: str, text: str) -> set[str]:
    """The DIDs an ``approval_counted`` row holds (a JSON list of text, as ``_counted_among``
    writes it); ``StoreError`` naming the request for anything else (a store edited by hand or
    damaged), never a count made of what the row happens to hold."""
    try:
        voters = json.loads(text)
    except (ValueError, RecursionError):
        voters = None
    if not isinstance(voters, list) or not all(isinstance(did, str) for did in voters):
        raise StoreError(
            f"approval request {approval_id}: its counted voters (approval_counted) are not a JSON "
            "list of DIDs; the store was changed outside agentgate"
        )
    return set(voters)
