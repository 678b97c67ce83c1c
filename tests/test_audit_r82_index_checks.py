"""Review R82: ``AuditLog.entries_at`` and ``entries`` skipped the index checks ``entry``,
``prove``, ``explain`` and ``consistency`` make, and ``referring`` the bound: a bool or a float
was read as the entry it equals (``entries(1.5)`` from entry 1, ``entries_at([True])`` keyed by
``True``), a string failed with a ``TypeError``, and an index past what a store's integer holds
reached the driver (``StoreError``); ``referring``'s not-an-int cases guard what it already did. Now, as docs/audit-format.md says, an index that is not an ``int`` is an
``InputError`` and one beyond 2**63-1 is ``BeyondLogEnd``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentgate.errors import BeyondLogEnd, InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    log = AuditLog(SQLiteStore(tmp_path / "a.db"), SigningKey(b"\x05" * 32))
    first = log.append({"kind": "deny", "principal": "p"})
    log.append({"kind": "deny", "principal": "p", "ref": first})
    log.append({"kind": "deny", "principal": "p"})
    return log


READS: dict[str, Callable[[AuditLog, Any], object]] = {
    "entries_at": lambda log, index: log.entries_at([index]),
    "entries": lambda log, index: list(log.entries(index)),
    "referring": lambda log, index: log.referring(index),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
@pytest.mark.parametrize("index", [True, 1.0, 1.5, "1", None])
def test_an_index_that_is_not_an_int_is_an_input_error(log: AuditLog, read: Any, index: object) -> None:
    with pytest.raises(InputError, match="entry index must be a whole number"):
        read(log, index)


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
@pytest.mark.parametrize("index", [2**63, 2**70])
def test_an_index_no_store_holds_is_past_the_end(log: AuditLog, read: Any, index: int) -> None:
    with pytest.raises(BeyondLogEnd, match=f"entry {index} is past its end"):
        read(log, index)


def test_ints_are_read_as_before(log: AuditLog) -> None:
    assert sorted(log.entries_at([2, 0])) == [0, 2]
    assert [e.index for e in log.entries(1)] == [1, 2]
    assert [e.index for e in log.referring(0)] == [1]
    assert log.referring(2**63 - 1) == [] and list(log.entries(2**63 - 1)) == []
