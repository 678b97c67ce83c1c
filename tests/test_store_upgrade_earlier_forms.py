"""A store written by an earlier version of agentgate, opened by this one.

The earlier forms are written out here as the DDL those versions ran (not taken from git): the
approval tables before ``approval_asked`` existed (a version of 2026-11-30, before the Gate
recorded which audit entry asked for an approval).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.errors import Denied
from agentgate.store import Store
from agentgate.store._postgres import PostgresStore
from agentgate.store.approvals import ApprovalStore
from agentgate.store.grants import GrantRepository

EARLIER_APPROVALS: dict[str, str] = {
    "sqlite": """
CREATE TABLE approvals (
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
CREATE INDEX approvals_call ON approvals (call_hash);
CREATE TABLE approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at REAL NOT NULL,
    PRIMARY KEY (approval_id, approver)
)
""",
    "postgresql": """
CREATE TABLE approvals (
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
CREATE INDEX approvals_call ON approvals (call_hash);
CREATE TABLE approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (approval_id, approver)
)
""",
}
"""The approval tables as the earlier version created them: no ``approval_asked``."""

AGENT, HUMAN = "did:key:zAgent", "did:key:zHuman"

EARLIER_NONCES: dict[str, str] = {
    dialect: f"""
CREATE TABLE agentgate_nonces (
    principal TEXT NOT NULL,
    nonce TEXT NOT NULL,
    expires {kind} NOT NULL,
    PRIMARY KEY (principal, nonce)
);
CREATE INDEX agentgate_nonces_expires ON agentgate_nonces (expires)
"""
    for dialect, kind in (("sqlite", "INTEGER"), ("postgresql", "BIGINT"))
}
"""The nonce table before it was keyed ``(expires, principal, nonce)`` (2026-11-29, review R29)."""


def test_a_nonce_table_of_the_earlier_form_still_refuses_a_replay(store: Store) -> None:
    """grants.py promises that a store created with the earlier nonce key keeps it and works:
    a nonce recorded by the earlier version is a replay after the upgrade, a new one is fresh,
    a revoked grant still refuses, and expired nonces are pruned."""
    expires = int(time.time()) + 300
    with store.transaction() as tx:
        for statement in EARLIER_NONCES[store.dialect].split(";"):
            tx.execute(statement)
        tx.execute(
            "INSERT INTO agentgate_nonces (principal, nonce, expires) VALUES (?, ?, ?), (?, ?, ?)",
            (AGENT, "n-old", expires, AGENT, "n-expired", int(time.time()) - 7200),
        )
    repo = GrantRepository(store)
    try:
        assert repo.consume_nonce(AGENT, "n-old", expires, ["g-1"]) == "replay"
        assert repo.consume_nonce(AGENT, "n-new", expires, ["g-1"]) == "fresh"
        assert repo.consume_nonce(AGENT, "n-new", expires, ["g-1"]) == "replay"
        assert repo.revoke("g-1", now=int(time.time()), reason="r33")
        assert repo.consume_nonce(AGENT, "n-next", expires, ["g-1"]) == "revoked"
        # n-expired: the first nonce this repository recorded ran the product's pruning
        assert sorted(n for (n,) in store.query("SELECT nonce FROM agentgate_nonces")) == ["n-new", "n-old"]
    finally:
        repo.close()


def _earlier_approvals(tx: Any, dialect: str) -> tuple[str, str]:
    """Create the earlier approval tables in ``tx`` with the rows that version wrote for one
    pending request and one approved (not yet used); their ids."""
    for statement in EARLIER_APPROVALS[dialect].split(";"):
        tx.execute(statement)
    now = time.time()
    pending, approved = uuid.uuid4().hex, uuid.uuid4().hex
    insert = (
        "INSERT INTO approvals (id, call_hash, requester, state, approver, quorum, created, expires_at, "
        "decided_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)"
    )
    tx.execute(insert, (pending, "call-p", AGENT, "pending", None, now, now + 3600, None))
    tx.execute(insert, (approved, "call-g", AGENT, "approved", HUMAN, now, now + 3600, now))
    tx.execute(
        "INSERT INTO approval_votes (approval_id, approver, decided_at) VALUES (?, ?, ?)",
        (approved, HUMAN, now),
    )
    return pending, approved


def test_requests_of_the_earlier_approval_tables_stay_answerable_after_the_upgrade(store: Store) -> None:
    """The promise of an earlier version's open requests holds: a pending one can still be
    approved and then used once, an approved one used once for its call; a request the earlier
    version opened has no ``approval_asked`` row, and ``open_for`` says so (``None``)."""
    with store.transaction() as tx:
        pending, approved = _earlier_approvals(tx, store.dialect)
    approvals = ApprovalStore(store)  # creates approval_asked beside the earlier tables
    assert store.query("SELECT COUNT(*) FROM approval_asked") == [(0,)]
    found = approvals.open_for("call-p", AGENT)
    assert found is not None and found[:2] == (pending, None)
    assert approvals.asked_index(pending, "call-p") is None
    approvals.approve(pending, HUMAN, call_hash="call-p")
    assert approvals.consume(pending, "call-p") == (HUMAN,)
    assert approvals.consume(approved, "call-g") == (HUMAN,)
    for used, call in ((pending, "call-p"), (approved, "call-g")):
        with pytest.raises(Denied):
            approvals.consume(used, call)
    fresh = approvals.request("call-n", AGENT, time.time() + 60)  # the new form is written too
    approvals.asked(fresh, 7)
    assert approvals.asked_index(fresh, "call-n") == 7


def test_store_init_by_a_role_that_may_not_create_the_new_tables_says_to_run_it_as_the_owner(
    postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """After an upgrade that adds a table, ``store init`` run by the application role (no CREATE
    on the schema) printed PostgreSQL's text alone ("PostgreSQL error: permission denied for
    schema public LINE 1: ... CONTEXT: PL/pgSQL function ..."): neither which part of agentgate
    failed nor what to do. It now names the part and says to run it as the schema's owner."""
    url = postgres_server.create_database()
    role = "r33_" + uuid.uuid4().hex[:8]
    with PostgresStore(url) as owner:
        with owner.transaction() as tx:
            _earlier_approvals(tx, "postgresql")
        assert main(["store", "init", "--store", url]) == 0  # every other part, and approval_asked
        with owner.transaction() as tx:  # back to the earlier form: the approval tables without it
            tx.execute("DROP TABLE approval_asked")
            tx.execute(f"CREATE ROLE {role} LOGIN")
            tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            tx.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    capsys.readouterr()
    app_url = url.replace(f"postgresql://{postgres_server.user}@", f"postgresql://{role}@")
    assert main(["store", "init", "--store", app_url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "approvals: this role may not create the tables" in err
    assert "permission denied for schema public" in err
    assert "run `agentgate store init` as the role that owns the schema" in err
    assert "CONTEXT" not in err  # PostgreSQL's first line only
    assert main(["store", "init", "--store", url]) == 0  # as the owner it completes the upgrade
    with PostgresStore(url) as owner:
        assert owner.query("SELECT to_regclass('approval_asked') IS NOT NULL") == [(True,)]
