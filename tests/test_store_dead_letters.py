"""The dead letters' store (agentgate/store/dead_letters.py): a letter's text is stored with a NUL
escaped, the same on every store; ``prune(before)`` forgets only letters recorded before the cut.
(The scheduler's use of it, and the CLI's listing, are in tests/test_tasks_dead_letters.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.store import SQLiteStore, Store
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.tasks import (
    Attempt,
    Scheduler,
    ToolCall,
)


async def test_a_nul_in_a_dead_letters_text_is_stored_escaped(tmp_path: Path) -> None:
    """Kills: ``_storable`` passing text through unchanged (the NUL escape dropped): a run id a
    model made with a NUL was kept raw on SQLite, while PostgreSQL refuses the whole letter.
    Rule: a dead letter's text keeps a NUL as the four characters ``\\\\x00``, the same on both
    stores, so the letter is recorded (not counted as lost) and reads back alike."""
    from agentgate.store.dead_letters import DeadLetterStore

    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t", run_id="run\x00x", call_id="c\x00"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0
    [letter] = DeadLetterStore(store).recent()
    assert (letter.run_id, letter.call_id) == ("run\\x00x", "c\\x00")
    await scheduler.aclose()
    store.close()


def test_prune_keeps_a_dead_letter_recorded_at_the_cut(store: Store) -> None:
    """``prune(before)`` forgets letters recorded *before* ``before``: one recorded at that very
    second stays. Kills: ``recorded_at <= ?`` in ``DeadLetterStore.prune``."""
    letters = DeadLetterStore(store)
    for n, at in enumerate((99.0, 100.0, 101.0)):
        letters.record(
            DeadLetter(f"id-{n}", at, "t", "acme", "agent", None, None, None, "d", (), "deadline", ())
        )
    assert letters.prune(100.0) == 1
    assert [x.id for x in letters.recent()] == ["id-2", "id-1"]
