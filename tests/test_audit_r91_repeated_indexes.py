"""``AuditLog.repeated_indexes`` checks ``start`` and ``end`` as ``entries`` checks an index.

Until review R91 both went to the query as given: a ``start`` of 2**70 reached the driver
(``StoreError``), where ``entries`` says ``BeyondLogEnd``, and ``'a'``, ``None`` or ``0.5`` answered
``[]``, as if no index were held by two rows, where ``entries`` refuses them with ``InputError``.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_audit_r86_repeated_index import _forged_beside_entry_4

from agentgate.errors import BeyondLogEnd, InputError
from agentgate.keys import SigningKey
from agentgate.store import Store
from agentgate.store.audit import AuditLog
from agentgate.store.audit._keys import DEFAULT_ORIGIN

KEY = SigningKey(b"\x07" * 32)


@pytest.fixture
def log(store: Store) -> AuditLog:
    """A log whose entry 4 two rows hold (a table whose primary key was dropped)."""
    made = AuditLog(store, KEY, DEFAULT_ORIGIN)
    _forged_beside_entry_4(store, made)
    return made


@pytest.mark.parametrize(
    "start", ["a", None, 0.5, True, -1], ids=["text", "None", "fraction", "bool", "negative"]
)
def test_a_start_entries_refuses_is_refused(log: AuditLog, start: Any) -> None:
    with pytest.raises(InputError) as entries_said:
        list(log.entries(start))
    with pytest.raises(InputError) as repeated_said:
        log.repeated_indexes(start)
    assert str(repeated_said.value) == str(entries_said.value)


def test_a_start_past_what_a_store_holds_is_past_the_end(log: AuditLog) -> None:
    with pytest.raises(BeyondLogEnd):
        log.repeated_indexes(2**70)


@pytest.mark.parametrize("end", ["a", 0.5, True], ids=["text", "fraction", "bool"])
def test_an_end_that_is_not_an_integer_is_refused(log: AuditLog, end: Any) -> None:
    with pytest.raises(InputError, match="end must be a whole number"):
        log.repeated_indexes(0, end)


def test_whole_bounds_still_find_the_repeated_index(log: AuditLog) -> None:
    assert log.repeated_indexes() == [(4, 2)]
    assert log.repeated_indexes(4, 5) == [(4, 2)]
    assert log.repeated_indexes(0, 2**70) == [(4, 2)]
    assert log.repeated_indexes(5) == []
    assert log.repeated_indexes(0, 4) == []
    assert log.repeated_indexes(4, -(10**5000)) == []
