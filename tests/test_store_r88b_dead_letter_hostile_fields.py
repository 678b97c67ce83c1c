"""``DeadLetterStore.record`` refuses, naming the field, with ``InputError`` and nothing written,
an error's ``attempt`` past what the stores' integers hold and a text field that is not valid
Unicode (review R88). Before, an ``attempt`` of 5,000 digits was a bare ``ValueError`` out of
``json.dumps`` (Python writes no integer past 4,300 digits), and a lone surrogate in ``id``,
``tool`` or ``run_id`` a ``StoreError`` about "a text value" that named none."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_store_r88_dead_letter_types import LETTER as TYPES_LETTER

from agentgate.errors import InputError
from agentgate.store import Store, open_store
from agentgate.store.dead_letters import AttemptError, DeadLetterStore

LETTER = dataclasses.replace(TYPES_LETTER, authority_chain=("g1",))

HOSTILE = {
    "attempt-5000-digits": (
        "errors",
        (AttemptError(10**5000, "transient", "TimeoutError", "m", 1.0),),
        r"the errors of dead letter 'letter-1' .* got an AttemptError whose attempt is an integer of 16610 bits "
        r"at position 0",
    ),
    "attempt-past-64-bits": (
        "errors",
        (AttemptError(2**63, "transient", "TimeoutError", "m", 1.0),),
        r"whose attempt is 9223372036854775808 at position 0",
    ),
    "id-surrogate": (
        "id",
        "\ud800",
        r"the id of dead letter '\\ud800' must be valid Unicode text: it holds lone",
    ),
    "tool-surrogate": (
        "tool",
        "se\ud800",
        r"the tool of dead letter 'letter-1' .* lone surrogate .* at character 3",
    ),
    "run_id-byte": (
        "run_id",
        "r\udcff",
        r"the run_id of dead letter 'letter-1' .* not UTF-8 \(0xff\) at character 2",
    ),
    "idempotency_key-surrogate": (
        "idempotency_key",
        "\udfff",
        r"the idempotency_key of dead letter 'letter-1'",
    ),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    yield opened
    opened.close()


@pytest.mark.parametrize(("field", "value", "message"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_field_is_refused_naming_it_and_nothing_written(
    store: Store, field: str, value: Any, message: str
) -> None:
    letters = DeadLetterStore(store)
    with pytest.raises(InputError, match=message) as caught:
        letters.record(dataclasses.replace(LETTER, **{field: value}))
    assert len(str(caught.value)) < 400
    assert store.query("SELECT COUNT(*) FROM agentgate_dead_letters")[0][0] == 0


def test_the_largest_stored_attempt_and_any_unicode_text_are_kept(store: Store) -> None:
    letters = DeadLetterStore(store)
    letter = dataclasses.replace(
        LETTER,
        tool="s\u00e9arch\U0001f600",
        errors=(AttemptError(2**63 - 1, "transient", "TimeoutError", "m\ud800", 1.0),),
    )
    letters.record(letter)
    assert letters.recent() == [letter]
