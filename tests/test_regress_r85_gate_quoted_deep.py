"""Review R85b: ``_shown.quoted``, which refusals use to quote a wrong value, called ``repr`` and
caught only ``ValueError`` (an integer too long to write): a list nested deeper than Python's
recursion limit, given as a grant id to ``BudgetLedger.usage``, ``spent`` or ``remaining`` (their
R85 grant-id check), or as a dead letter's id to ``DeadLetterStore.record`` with a recorded_at
that is no time, was a bare ``RecursionError`` out of the refusal instead of its ``InputError``; a
value whose own ``__repr__`` raised gave that exception instead. Such values are now quoted by
their type.

Real components: a ledger and a dead-letter store on a SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.store.ledger import BudgetLedger


def _deep() -> list[object]:
    """A list in a list, deeper than any recursion limit lets ``repr`` write."""
    deep: list[object] = []
    for _ in range(200_000):
        deep = [deep]
    return deep


class Unwritable:
    """A value of the caller's own whose ``__repr__`` fails."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr today")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    made = SQLiteStore(tmp_path / "a.db")
    yield made
    made.close()


@pytest.mark.parametrize("read", ["usage", "spent", "remaining"])
def test_a_grant_id_nested_too_deep_to_write_is_refused_by_its_type(store: SQLiteStore, read: str) -> None:
    ledger = BudgetLedger(store)
    with pytest.raises(InputError, match=r"a grant id must be .*, got a list nested too deep to write$"):
        getattr(ledger, read)(_deep())


def test_a_grant_id_whose_repr_fails_is_refused_by_its_type(store: SQLiteStore) -> None:
    with pytest.raises(InputError, match=r"got a Unwritable that cannot be written$"):
        BudgetLedger(store).usage(Unwritable())


def _letter(letter_id: object, recorded_at: float) -> DeadLetter:
    return DeadLetter(
        id=letter_id,  # type: ignore[arg-type]
        recorded_at=recorded_at,
        tool="lookup",
        tenant="t",
        principal="bot",
        run_id=None,
        call_id=None,
        idempotency_key=None,
        arguments_digest="d",
        authority_chain=(),
        reason="retries exhausted",
        errors=(),
    )


def test_a_dead_letter_id_nested_too_deep_to_write_is_quoted_by_its_type(store: SQLiteStore) -> None:
    letters = DeadLetterStore(store)
    with pytest.raises(InputError, match="the recorded_at of dead letter a list nested too deep to write"):
        letters.record(_letter(_deep(), float("nan")))
    # With a time, the id that is not text is refused as such, quoted by its type (review R88).
    with pytest.raises(
        InputError, match="the id of dead letter a list nested too deep to write must be text"
    ):
        letters.record(_letter(_deep(), 1.0))
    assert letters.recent() == []
