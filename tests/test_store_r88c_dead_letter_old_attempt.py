"""A dead letter's attempt bound holds on ``record`` only (review R88, third regression pass).

Review R88 bounded an error's ``attempt`` to what the stores' integers hold, and applied the bound
on the read too: a letter an earlier version recorded with an attempt of 2**63 then read as a
corrupt row, and ``recent`` (``agentgate tasks dead-letters``) failed with ``StoreError``. Reading
now takes any int, as before. The bound ``record`` keeps is said as the range it is: an attempt
number from 1 to 2**63 - 1 (the refusal said "at most 19 digits", which 2**63 has, and measured
with ``abs``, so -2**63 was refused as too big while -5 was kept)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store_r88_dead_letter_types import LETTER as TYPES_LETTER

from agentgate.errors import InputError
from agentgate.store import Store, open_store
from agentgate.store.dead_letters import AttemptError, DeadLetterStore

LETTER = dataclasses.replace(TYPES_LETTER, authority_chain=())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    yield opened
    opened.close()


@pytest.mark.parametrize("attempt", [2**63, -(2**63), 0, -5])
def test_a_letter_recorded_before_the_bound_is_read_back(store: Store, attempt: int) -> None:
    letters = DeadLetterStore(store)
    error = {"attempt": attempt, "error_class": "transient", "error_type": "X", "message": "m", "at": 1.0}
    with store.transaction() as tx:  # as ``record`` wrote it before review R88
        tx.execute(
            "INSERT INTO agentgate_dead_letters (id, recorded_at, tool, tenant, principal, run_id, "
            "call_id, idempotency_key, arguments_digest, authority_chain, reason, errors) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("old", 1.0, "t", "a", "p", None, None, None, "d", "[]", "r", json.dumps([error])),
        )
    (letter,) = letters.recent()
    assert letter.errors == (AttemptError(attempt, "transient", "X", "m", 1.0),)


@pytest.mark.parametrize("attempt", [2**63, -(2**63), 0, -5])
def test_record_refuses_an_attempt_outside_1_to_2_63_minus_1_saying_so(store: Store, attempt: int) -> None:
    letters = DeadLetterStore(store)
    bad = dataclasses.replace(LETTER, errors=(AttemptError(attempt, "transient", "X", "m", 1.0),))
    with pytest.raises(InputError, match=r"an int attempt from 1 to 2\*\*63 - 1, .* whose attempt is "):
        letters.record(bad)
    assert letters.recent() == []


@pytest.mark.parametrize("attempt", [1, 2**63 - 1])
def test_record_keeps_an_attempt_from_1_to_2_63_minus_1(store: Store, attempt: int) -> None:
    letters = DeadLetterStore(store)
    letter = dataclasses.replace(LETTER, errors=(AttemptError(attempt, "transient", "X", "m", 1.0),))
    letters.record(letter)
    assert letters.recent() == [letter]
