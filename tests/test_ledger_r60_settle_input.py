"""Settling by hand (agentgate/store/held.py ``settle_held``, agentgate/store/once.py ``settle``)
through the Python API with a ``by`` that is not text, an age that is not a number or a key that is
not text: a typed ``InputError`` before anything is read or written, as the CLI's own checks give."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.held import settle_held
from agentgate.store.once import settle

RESERVATION = "0" * 32


@pytest.mark.parametrize(
    "bad",
    [
        {"by": None},
        {"by": 5},
        {"by": ["ops"]},
        {"min_age_s": "900"},
        {"min_age_s": None},
        {"min_age_s": True},
    ],
)
def test_settling_by_hand_with_a_by_or_age_of_the_wrong_kind_is_input_not_a_traceback(
    sqlite_store: SQLiteStore, bad: dict[str, Any]
) -> None:
    """Review R60: settle_held/settle with by=None raised AttributeError, min_age_s='900' TypeError."""
    store = sqlite_store
    log = AuditLog(store, open_log_key(store))
    kwargs: dict[str, Any] = {"by": "ops-1", **bad}
    with pytest.raises(InputError) as held_error:
        settle_held(store, log, RESERVATION, ran=True, **kwargs)
    with pytest.raises(InputError) as once_error:
        settle(store, log, "some-call", ran=True, **kwargs)
    for error in (held_error, once_error):
        assert error.type is InputError  # not SettlementRefused: the input itself is wrong
    assert log.size() == 0


def test_settling_a_once_only_call_whose_key_is_not_text_is_input(sqlite_store: SQLiteStore) -> None:
    """Review R60: once.settle of a key that is a list raised a StoreError (the driver's binding error)."""
    store = sqlite_store
    log = AuditLog(store, open_log_key(store))
    with pytest.raises(InputError, match="is text"):
        settle(store, log, ["some-call"], ran=False, by="ops-1")  # type: ignore[arg-type]
