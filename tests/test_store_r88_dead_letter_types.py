"""``DeadLetterStore.record`` refuses a letter with a field of the wrong type with ``InputError``
naming the field, nothing written, on both stores (review R88). Until then only ``recorded_at``
was checked: a ``tool`` of 5 or an ``id`` of bytes was a bare ``TypeError``, and a text
``authority_chain`` (``"g1g2"``) was stored split into its characters, ``("g", "1", "g", "2")``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore

LETTER = DeadLetter(
    "letter-1",
    1_700_000_000.0,
    "search",
    "acme",
    "alice",
    None,
    None,
    None,
    "sha256:x",
    ("g1", "g2"),
    "gave_up",
    (AttemptError(1, "transient", "TimeoutError", "timed out", 1_700_000_000.0),),
)

WRONG = {
    "tool-int": ("tool", 5, "the tool of dead letter 'letter-1' must be text, got 5"),
    "id-bytes": ("id", b"letter-1", "the id of dead letter b'letter-1' must be text, got a bytes"),
    "reason-none": ("reason", None, "the reason of dead letter 'letter-1' must be text, got None"),
    "run_id-int": ("run_id", 7, "the run_id of dead letter 'letter-1' must be text or None, got 7"),
    "chain-none": ("authority_chain", None, "the authority_chain of dead letter 'letter-1' must be a tuple"),
    "chain-text": ("authority_chain", "g1g2", "the authority_chain of dead letter 'letter-1' .* got a str"),
    "chain-link-int": ("authority_chain", ("g1", 2), "got 2 at position 1"),
    "errors-none": ("errors", None, "the errors of dead letter 'letter-1' must be a tuple of AttemptError"),
    "errors-dict": ("errors", ({"attempt": 1},), "got a dict at position 0"),
    "error-attempt-text": (
        "errors",
        (AttemptError("1", "transient", "TimeoutError", "m", 1.0),),  # type: ignore[arg-type]
        "got an AttemptError whose attempt is a str at position 0",
    ),
}


@pytest.mark.parametrize(("field", "value", "message"), list(WRONG.values()), ids=list(WRONG))
def test_a_field_of_the_wrong_type_is_refused_naming_it_and_nothing_written(
    store: Store, field: str, value: Any, message: str
) -> None:
    letters = DeadLetterStore(store)
    with pytest.raises(InputError, match=message):
        letters.record(dataclasses.replace(LETTER, **{field: value}))
    assert store.query("SELECT COUNT(*) FROM agentgate_dead_letters")[0][0] == 0


def test_a_letter_of_its_types_is_kept_as_given(store: Store) -> None:
    letters = DeadLetterStore(store)
    letters.record(LETTER)
    letters.record(dataclasses.replace(LETTER, id="letter-2", authority_chain=["g3"]))  # type: ignore[arg-type]
    assert letters.recent() == [LETTER, dataclasses.replace(LETTER, id="letter-2", authority_chain=("g3",))]
