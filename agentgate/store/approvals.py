"""Approvals: a human signs off one exact call, once, before it expires.

An approval request is bound to a call hash (the hash of tool, arguments, chain and nonce that
the authority core computes) and has an expiry. Every state change is a conditional update on
the row's current state, so: an approval cannot be given after the request expired (a late
approval never flips a timed-out request), the approver must differ from the requester, and an
approval is consumed once, for the call it was given for; a replay finds it already consumed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from agentgate.errors import Denied, Expired, InputError
from agentgate.store._base import Dialect, Store, Transaction

APPROVALS_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    created REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    consumed_at REAL
);
CREATE INDEX IF NOT EXISTS approvals_call ON approvals (call_hash);
""",
    "postgresql": """
DO $$
BEGIN
    -- Created only when missing: a role without CREATE on the schema can still start agentgate.
    IF to_regclass('approvals') IS NULL THEN
        CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            call_hash TEXT NOT NULL,
            requester TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
            approver TEXT,
            created DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            decided_at DOUBLE PRECISION,
            consumed_at DOUBLE PRECISION
        );
    END IF;
    IF to_regclass('approvals_call') IS NULL THEN
        CREATE INDEX approvals_call ON approvals (call_hash);
    END IF;
END;
$$;
""",
}


@dataclass(frozen=True)
class Approval:
    """One approval request and where it stands. Times are Unix seconds."""

    id: str
    call_hash: str
    requester: str
    state: str
    approver: str | None
    expires_at: float


class ApprovalStore:
    """Approval requests and decisions, shared by every process on the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("approvals", APPROVALS_DDL)

    def _run(self, tx: Transaction | None, sql: str, params: tuple[object, ...]) -> int:
        if tx is not None:
            tx.execute(sql, params)
            return tx.rowcount
        with self.store.transaction() as own:
            own.execute(sql, params)
            return own.rowcount

    def request(
        self, call_hash: str, requester: str, expires_at: float, *, tx: Transaction | None = None
    ) -> str:
        """Open a request for the call ``call_hash``; returns its id. ``InputError`` on empty values."""
        if not call_hash or not requester:
            raise InputError("an approval request needs a call hash and a requester")
        approval_id = uuid.uuid4().hex
        self._run(
            tx,
            "INSERT INTO approvals (id, call_hash, requester, state, created, expires_at) "
            "VALUES (?, ?, ?, 'pending', ?, ?)",
            (approval_id, call_hash, requester, time.time(), float(expires_at)),
        )
        return approval_id

    def approve(
        self, approval_id: str, approver: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> None:
        """Approve a pending, unexpired request as ``approver`` (who must not be the requester).

        Raises ``Expired`` if the request has expired, ``Denied`` if the approver is the requester
        or the request was already decided, ``InputError`` if there is no such request.
        """
        self._decide(approval_id, approver, "approved", now, tx)

    def deny(
        self, approval_id: str, approver: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> None:
        """Refuse a pending request; same rules and errors as ``approve``."""
        self._decide(approval_id, approver, "denied", now, tx)

    def _decide(
        self, approval_id: str, approver: str, state: str, now: float | None, tx: Transaction | None
    ) -> None:
        now = time.time() if now is None else now
        changed = self._run(
            tx,
            "UPDATE approvals SET state = ?, approver = ?, decided_at = ? "
            "WHERE id = ? AND state = 'pending' AND expires_at > ? AND requester <> ?",
            (state, approver, now, approval_id, now, approver),
        )
        if changed != 1:
            self._explain(tx, approval_id, now, approver=approver)

    def consume(
        self, approval_id: str, call_hash: str, *, now: float | None = None, tx: Transaction | None = None
    ) -> str:
        """Use an approval for the call ``call_hash``, once; returns the approver's id.

        Raises ``Denied`` if it is not approved, was already used, or was given for another call;
        ``Expired`` if it has expired; ``InputError`` if there is no such approval.
        """
        now = time.time() if now is None else now
        changed = self._run(
            tx,
            "UPDATE approvals SET state = 'consumed', consumed_at = ? "
            "WHERE id = ? AND call_hash = ? AND state = 'approved' AND expires_at > ?",
            (now, approval_id, call_hash, now),
        )
        if changed != 1:
            self._explain(tx, approval_id, now, call_hash=call_hash)
        record = self._read(tx, approval_id)
        assert record.approver is not None
        return record.approver

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
        if record.expires_at <= now:
            raise Expired(f"approval {approval_id} expired")
        if approver and record.requester == approver:
            raise Denied("the approver must not be the requester")
        raise Denied(f"approval {approval_id} is {record.state}")

    def get(self, approval_id: str) -> Approval:
        """One request; ``InputError`` if there is none."""
        with self.store.transaction(immediate=False) as tx:
            return self._get(tx, approval_id)

    def _get(self, tx: Transaction, approval_id: str) -> Approval:
        rows = tx.execute(
            "SELECT call_hash, requester, state, approver, expires_at FROM approvals WHERE id = ?",
            (approval_id,),
        )
        if not rows:
            raise InputError(f"no approval request {approval_id!r}")
        call_hash, requester, state, approver, expires_at = rows[0]
        return Approval(approval_id, str(call_hash), str(requester), str(state), approver, float(expires_at))
