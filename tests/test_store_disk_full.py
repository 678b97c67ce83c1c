"""The SQLite store when its database cannot grow (``SQLITE_FULL``).

``PRAGMA max_page_count`` makes SQLite answer ``database or disk is full`` (``SQLITE_FULL``) as a
full disk does, without root; it fails the statement that needs a new page, where a full disk
mostly fails the commit (a 2 MiB tmpfs and an ext4 image were used by hand for that)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import POLICY

from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, StoreError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.audit import create_audit_tables

UNCAPPED = 1 << 30


class FillableStore(SQLiteStore):
    """A SQLite store whose database cannot grow by a page while ``full`` (or beyond ``pages``)."""

    full = False
    pages = UNCAPPED

    def _acquire(self) -> sqlite3.Connection:
        conn = super()._acquire()
        # Below the file's size SQLite takes the size itself: nothing more can be added.
        conn.execute(f"PRAGMA max_page_count = {1 if self.full else self.pages}")
        return conn


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Gate, FillableStore, AgentIdentity]]:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
    store = FillableStore(tmp_path / "agentgate.db")
    policy = parse_policy(POLICY.format(budget=10**9, **{n: k.did for n, k in keys.items()}), source="g")
    gate = Gate(policy, store)
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    yield gate, store, agent
    store.full = False
    gate.close()


def _allows_without_outcome(gate: Gate) -> list[int]:
    entries = list(gate.audit.entries())
    settled = {e.ref for e in entries if e.kind == "outcome"}
    return [
        e.index
        for e in entries
        if e.kind == "allow" and (e.resource or "").startswith("model:") and e.index not in settled
    ]


def test_outcomes_that_meet_a_full_disk_are_kept_until_it_has_room(
    gated: tuple[Gate, FillableStore, AgentIdentity],
) -> None:
    """The commit of pending outcomes (the background thread's, or ``flush``) on a full disk
    wrote none and dropped the rest for good: each outcome was retried alone under a savepoint,
    the first few fitted in the last page, and the others, refused one by one, were logged as
    not recorded while their transaction committed. Their reservations stayed held for ever."""
    gate, store, agent = gated
    auths = [gate.authorize(agent, Call.model("small"), tokens=(10, 10)) for _ in range(30)]
    gate.flush()
    store.full = True
    for auth in auths:
        gate.run(auth, lambda: "text", spent=lambda _: (10, 10))
    gate.flush()  # what the background thread does: fails, keeps them
    assert gate.store.query("SELECT COUNT(*) FROM audit_log WHERE entry LIKE '%\"outcome\"%'") == [(0,)]
    store.full = False
    gate.flush()
    assert _allows_without_outcome(gate) == []
    assert gate.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'") == [(0,)]
    assert gate.verify().ok


def test_a_decision_on_a_full_disk_is_refused_whole_and_the_gate_goes_on(
    gated: tuple[Gate, FillableStore, AgentIdentity],
) -> None:
    """Fail closed, nothing half-written, and the same gate decides again once there is room."""
    gate, store, agent = gated
    ran = gate.authorize(agent, Call.model("small"), tokens=(10, 10))
    gate.run(ran, lambda: "text", spent=lambda _: (10, 10))  # its outcome waits, carried by the next decision
    store.full = True
    refused = 0
    for _ in range(30):  # the last page's room runs out within a few decisions
        try:
            gate.authorize(agent, Call.model("small"), tokens=(10, 10))
        except AgentGateError as exc:
            assert isinstance(exc, StoreError) and "database or disk is full" in str(exc)
            refused += 1
    assert refused > 0
    # Each reservation held is an allow written (and not settled yet): none without its entry.
    held = gate.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")[0][0]
    assert held == len(_allows_without_outcome(gate))
    store.full = False
    after = gate.authorize(agent, Call.model("small"), tokens=(10, 10))
    assert after.allowed
    gate.run(after, lambda: "text", spent=lambda _: (10, 10))
    gate.flush()
    assert ran.audit_index not in _allows_without_outcome(gate)
    assert gate.verify().ok


@pytest.mark.parametrize("pages", [2, 3])
def test_tables_are_created_whole_or_not_at_all(tmp_path: Path, pages: int) -> None:
    """A table creation stopped by a full disk left ``audit_log`` without the triggers that keep
    it append-only (each statement of the script was its own commit)."""
    store = FillableStore(tmp_path / "agentgate.db")
    store.pages = pages
    with pytest.raises(StoreError, match="database or disk is full"):
        create_audit_tables(store)
    assert store.query("SELECT name FROM sqlite_master") == []
    store.pages = UNCAPPED
    assert create_audit_tables(store)  # the same store, once there is room: every table, every trigger
    triggers = store.query(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit_log'"
    )
    assert triggers == [(4,)]  # next index, no update, no delete, the reference index
    store.close()


def test_a_transaction_that_caught_a_full_disk_is_not_committed(tmp_path: Path) -> None:
    """SQLite asks for a ROLLBACK after SQLITE_FULL, and may have rolled the whole transaction
    back already: a statement run after it in the block (the error caught) was then a commit of
    its own, and the rows written before it were lost with it. Nothing is written, the block
    ends in ``StoreError``, and the store's connection is usable again."""
    store = FillableStore(tmp_path / "agentgate.db")
    with store.transaction() as tx:
        tx.execute("CREATE TABLE t (x BLOB)")
    store.full = True
    refused = pytest.raises(StoreError, match=r"database or disk is full.*nothing was written")
    with refused, store.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (x'00')")  # fits in the page the table has
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            tx.execute("INSERT INTO t VALUES (zeroblob(100000))")
        tx.execute("INSERT INTO t VALUES (x'01')")  # the caller goes on
    store.full = False
    assert store.query("SELECT x FROM t") == []
    with store.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert store.query("SELECT COUNT(*) FROM t") == [(1,)]
    store.close()
