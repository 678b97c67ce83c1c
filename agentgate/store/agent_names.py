"""Free agent names granted on a store, by how they read (review R69).

``agentgate_agent_names(reading, name, first_at)``: one row per reading (``_confusables.readings``,
at most two per name) of a free agent name (one no principal holds) that ``Gate.issue`` or
``Gate.delegate`` granted, by any process on the store: the first name granted under that
reading, and when (Unix seconds). A Gate refuses a new name that shares a reading with another
name (``heIper`` after ``helper``, ``name_reads_alike``). The claim is one ``INSERT ... ON
CONFLICT DO NOTHING`` per reading in the grant's own transaction, then one read of who holds
them: two processes granting ``helper`` and ``heIper`` at once cannot both win (PostgreSQL's
second insert waits for the first's transaction; SQLite's write transactions run one at a
time), and a grant refused or rolled back claims nothing.

Rows are only added: a name, once granted, holds its readings for as long as the store lives
(nothing prunes them). Version 2's code, which knows nothing of the
table, grants without claiming (docs/operations.md, Upgrading).
"""

from __future__ import annotations

from collections.abc import Collection

from agentgate.store._base import Dialect, Store, Transaction

AGENT_NAMES_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_agent_names (
    reading TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    first_at INTEGER NOT NULL
);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_agent_names (
    reading TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    first_at BIGINT NOT NULL
);
""",
}

_CLAIM = (
    "INSERT INTO agentgate_agent_names (reading, name, first_at) VALUES (?, ?, ?) "
    "ON CONFLICT (reading) DO NOTHING"
)


class AgentNames:
    """The free agent names granted on a store, shared by every process that uses it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("agent_names", AGENT_NAMES_DDL)

    def claim(self, tx: Transaction, name: str, readings: Collection[str], now: int) -> str | None:
        """Record ``readings`` as ``name``'s in ``tx`` where no other name holds them; returns
        another name that holds one of them (first granted, the claim then to be rolled back
        with ``tx``), else ``None``. Readings are claimed in sorted order, so that two claims
        sharing two readings wait for one another instead of deadlocking."""
        ordered = sorted(readings)
        for reading in ordered:
            tx.execute(_CLAIM, (reading, name, now))
        marks = ", ".join("?" * len(ordered))
        rows = tx.execute(
            f"SELECT name FROM agentgate_agent_names WHERE reading IN ({marks}) AND name <> ? "
            "ORDER BY first_at, name LIMIT 1",
            (*ordered, name),
        )
        return str(rows[0][0]) if rows else None
