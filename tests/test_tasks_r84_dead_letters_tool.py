"""Review R84: ``DeadLetterStore.recent(tool=...)`` did not check ``tool``'s type, as it checks
``limit`` (and ``prune`` its ``before``): ``tool=5`` raised a bare ``TypeError`` and ``tool=["a"]``
came back as a ``StoreError`` about binding a parameter. Each is now an ``InputError`` naming
``tool``. A real SQLite store."""

from __future__ import annotations

import time

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore


def _letter(tool: str) -> DeadLetter:
    return DeadLetter(
        id=f"id-{tool}",
        recorded_at=time.time(),
        tool=tool,
        tenant="default",
        principal="anonymous",
        run_id=None,
        call_id=None,
        idempotency_key=None,
        arguments_digest="",
        authority_chain=(),
        reason="attempts_exhausted",
        errors=(),
    )


@pytest.mark.parametrize("tool", [5, ["a"], True, b"a", ("a",)], ids=repr)
def test_a_tool_that_is_not_text_is_refused_naming_tool(sqlite_store: SQLiteStore, tool: object) -> None:
    letters = DeadLetterStore(sqlite_store)
    with pytest.raises(InputError, match=rf"dead letters' tool must be .* got {type(tool).__name__}$"):
        letters.recent(tool=tool)  # type: ignore[arg-type]  # the wrong type is the point


def test_a_tool_that_is_text_or_none_still_selects(sqlite_store: SQLiteStore) -> None:
    letters = DeadLetterStore(sqlite_store)
    letters.record(_letter("a"))
    letters.record(_letter("b"))
    assert [letter.tool for letter in letters.recent(tool="a")] == ["a"]
    assert sorted(letter.tool for letter in letters.recent(tool=None)) == ["a", "b"]
