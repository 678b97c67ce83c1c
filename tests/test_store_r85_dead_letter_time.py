"""``DeadLetterStore.record`` refuses a letter whose ``recorded_at`` is not a finite number of
Unix seconds with ``InputError``, nothing written, on both stores (review R85). Until then NaN
was a ``StoreError`` on SQLite (bound as NULL) and stored on PostgreSQL, where no prune ever
forgot it (nor infinity) and every listing put it first; text was stored on SQLite, where every
listing then failed on the row as corrupt."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore

NOT_A_TIME = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "text": "soon",
    "bool": True,
    "none": None,
    "10**400": 10**400,
}


def _letter(recorded_at: Any) -> DeadLetter:
    return DeadLetter(
        "letter-1", recorded_at, "search", "acme", "alice", None, None, None, "sha256:x", (), "gave_up", ()
    )


@pytest.mark.parametrize("recorded_at", list(NOT_A_TIME.values()), ids=list(NOT_A_TIME))
def test_a_letter_recorded_at_no_finite_time_is_refused_and_nothing_written(
    store: Store, recorded_at: object
) -> None:
    letters = DeadLetterStore(store)
    with pytest.raises(InputError, match="recorded_at of dead letter 'letter-1' must be a finite number"):
        letters.record(_letter(recorded_at))
    assert store.query("SELECT COUNT(*) FROM agentgate_dead_letters")[0][0] == 0
    assert letters.recent() == []


def test_a_letter_recorded_at_a_finite_time_is_kept_and_pruned(store: Store) -> None:
    letters = DeadLetterStore(store)
    letters.record(_letter(1_700_000_000))
    assert [letter.recorded_at for letter in letters.recent()] == [1_700_000_000.0]
    assert letters.prune(1_700_000_001) == 1
    assert letters.recent() == []
