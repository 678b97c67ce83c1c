"""``DeadLetterStore.record`` keeps a letter whose id is at most 256 characters, and refuses a
longer one with ``InputError``, nothing written, on both stores (review R88, as the ledger's grant
ids since review R87). Until then SQLite kept a letter of a 4,000-character id and PostgreSQL
refused it with a ``StoreError`` (a B-tree index entry of the table's key holds about 2.7 KB)."""

from __future__ import annotations

import dataclasses
import random
import string

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore

LETTER = DeadLetter("letter-1", 1_700_000_000.0, "t", "a", "p", None, None, None, "sha256:x", ("g",), "r", ())


def _incompressible(length: int) -> str:
    chosen = random.Random(1)
    return "".join(chosen.choice(string.ascii_letters) for _ in range(length))


@pytest.mark.parametrize("length", [257, 4_000])
def test_a_letter_id_past_256_characters_is_refused_on_both_stores(store: Store, length: int) -> None:
    letters = DeadLetterStore(store)
    with pytest.raises(
        InputError, match=f"the id of dead letter .* must be at most 256 characters, got {length:,}"
    ):
        letters.record(dataclasses.replace(LETTER, id=_incompressible(length)))
    assert letters.recent() == []


def test_a_letter_id_of_256_characters_is_kept_on_both_stores(store: Store) -> None:
    letters = DeadLetterStore(store)
    longest = dataclasses.replace(LETTER, id="\U0010ffff" * 256)
    letters.record(longest)
    assert letters.recent() == [longest]
