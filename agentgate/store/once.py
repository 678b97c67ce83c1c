"""Once-only tool calls: what became of each run of a non-idempotent tool call, durably.

A framework that resumes a run from its checkpoint (LangGraph after a crash or a restart) runs
again every node whose result it had not saved, and with it every tool call that node makes, under
the same run, task and tool call id. For a tool that is not idempotent (a payment, an e-mail) that
second run is a second effect. The Gate therefore keeps one row per such call, keyed by the call's
idempotency key (tenant, principal, grant, run, tool, call id and argument digest:
``agentgate.tasks.idempotency_key``), written in the transaction that records the call's ``allow``
(``started``) and updated in the one that records its outcome (``ok``, ``error``, ``paused``, or
``not_run`` when the scheduler refused it before it could start). A later decision on the same key
finds the row and refuses, unless the call paused (LangGraph's ``interrupt()`` inside the tool: it
is meant to run again) or never started (docs/tasks.md).

The row outlives the process, so the refusal holds after a restart; a call whose process died
while it ran stays ``started``: it may have had its effect, and nothing runs it again on its own.
"""

from __future__ import annotations

from typing import Literal

from agentgate.store._base import Dialect, Store, Transaction

ONCE_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_once (
    key TEXT PRIMARY KEY,
    allow_index INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'ok', 'error', 'paused', 'not_run'))
);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_once (
    key TEXT PRIMARY KEY,
    allow_index BIGINT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'ok', 'error', 'paused', 'not_run'))
);
""",
}

OnceState = Literal["started", "ok", "error", "paused", "not_run"]

RUN_AGAIN: frozenset[str] = frozenset({"paused", "not_run"})
"""States after which the same call may be decided and run again."""


class OnceCalls:
    """The runs of non-idempotent tool calls, shared by every process that uses the same store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("once", ONCE_DDL)

    def last(self, tx: Transaction, key: str) -> tuple[OnceState, int] | None:
        """The state of the call ``key`` and the index of its latest ``allow`` entry, or ``None``
        if it never ran. Read in ``tx``, which holds the audit append lock (every Gate write
        takes it first), so two deciders of the same call cannot both find nothing."""
        rows = tx.execute("SELECT state, allow_index FROM agentgate_once WHERE key = ?", (key,))
        if not rows:
            return None
        state, index = rows[0]
        return state, int(index)

    def start(self, tx: Transaction, key: str, allow_index: int) -> None:
        """Record in ``tx`` that the call ``key`` was allowed by entry ``allow_index`` and may run."""
        tx.execute(
            "INSERT INTO agentgate_once (key, allow_index, state) VALUES (?, ?, 'started') "
            "ON CONFLICT (key) DO UPDATE SET allow_index = excluded.allow_index, state = 'started'",
            (key, allow_index),
        )

    def finish(self, tx: Transaction, key: str, state: OnceState) -> None:
        """Record in ``tx`` what became of the call ``key`` (``ok``, ``error``, ``paused``, ``not_run``)."""
        tx.execute("UPDATE agentgate_once SET state = ? WHERE key = ?", (state, key))
