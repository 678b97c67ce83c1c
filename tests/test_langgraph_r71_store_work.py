"""What one run of the LangGraph benchmark's gated agent writes to a real SQLite store, read
statement by statement: each call's decision is one committing transaction of its own (the
outcome of an earlier call carried into it, or committed by the background thread when no
decision comes within its linger), whatever the durability (docs/langgraph.md, "Performance",
seventeenth pass)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_benchmarks_contract import _load

pytest.importorskip("langchain")
BENCH = _load("langgraph_overhead")

from agentgate.store import SQLiteStore  # noqa: E402

CALLS_PER_RUN = 50
"""20 tool calls of the supervisor's own, 3 delegations, 27 model calls (the benchmark's run)."""

_KINDS = {kind: f'"kind":"{kind}"'.encode().hex() for kind in ("allow", "deny", "outcome")}


class _Transactions:
    """The committing transactions of every store connection, each as the kinds of the audit
    entries it wrote (read from the statement SQLite expands, the entry as a hex blob)."""

    def __init__(self) -> None:
        self.counting = False
        self.committed: list[list[str]] = []

    def watch(self, conn: sqlite3.Connection) -> None:
        last: list[str] = [""]
        writing: list[list[str] | None] = [None]  # the kinds of the open transaction's entries

        def seen(sql: str) -> None:
            if sql == last[0]:
                return  # the same statement again for each trigger it runs (Python's callback)
            last[0] = sql
            kinds = writing[0]
            if sql == "BEGIN IMMEDIATE":
                writing[0] = []
            elif sql == "COMMIT" and kinds is not None:
                if self.counting:
                    self.committed.append(kinds)
                writing[0] = None
            elif sql.startswith("INSERT INTO audit_log") and kinds is not None:
                kinds.extend(kind for kind, mark in _KINDS.items() if mark in sql)

        conn.set_trace_callback(seen)


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_each_decision_of_a_gated_run_is_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synchronous: str
) -> None:
    """Review R71: the store work of a decision inside a LangGraph run was counted only by the
    benchmark's report: a change that split a decision's writes over two commits (two syncs
    each at FULL) would have passed the suite. Each of a run's 50 calls is decided in one
    committing transaction holding its decision's entry; any other commits only outcomes (how
    many is a matter of timing: what no decision carries within the linger is committed alone)."""
    transactions = _Transactions()
    connect = SQLiteStore.connect

    def traced(self: SQLiteStore, synchronous: str | None = None) -> sqlite3.Connection:
        conn = connect(self, synchronous)
        transactions.watch(conn)
        return conn

    monkeypatch.setattr(SQLiteStore, "connect", traced)
    run, gate = BENCH.build_gated(tmp_path, synchronous, True)
    try:
        run()  # warm-up: the sub-agents' budget rows and grants made
        gate.flush()
        transactions.counting = True
        run()
        gate.flush()
        transactions.counting = False
    finally:
        gate.close()
    deciding = [tx for tx in transactions.committed if {"allow", "deny"} & set(tx)]
    assert len(deciding) == CALLS_PER_RUN, transactions.committed
    assert all(tx.count("allow") + tx.count("deny") == 1 for tx in deciding), deciding
    others = [tx for tx in transactions.committed if not {"allow", "deny"} & set(tx)]
    assert all(tx and set(tx) == {"outcome"} for tx in others), others
