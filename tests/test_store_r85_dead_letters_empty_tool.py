"""``DeadLetterStore.recent(tool="")`` is refused with ``InputError`` on both stores, as the CLI
refuses ``agentgate tasks dead-letters --tool ""`` (review R85): an empty name names no tool.
Until then it was read as no filter, and every tool's letters were listed."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore


def _letter(letter_id: str, tool: str) -> DeadLetter:
    return DeadLetter(
        letter_id, 1_700_000_000.0, tool, "acme", "alice", None, None, None, "sha256:x", (), "gave_up", ()
    )


def test_an_empty_tool_names_no_tool_and_is_refused(store: Store) -> None:
    letters = DeadLetterStore(store)
    letters.record(_letter("one", "search"))
    letters.record(_letter("two", "fetch"))
    with pytest.raises(InputError, match="tool must be a tool's name or None, got an empty name"):
        letters.recent(tool="")
    assert [letter.id for letter in letters.recent(tool="search")] == ["one"]
    assert sorted(letter.id for letter in letters.recent()) == ["one", "two"]
