"""Review R86c: the audit store kept its own copy of the Merkle checks' integer rule, not updated
with it: it required ``type(value) is int`` and quoted with ``repr``, so ``AuditLog.consistency``
refused a numpy integer (any integer type of its own) the Merkle builders take, an int subclass of 10**5000 was a bare
``ValueError`` and a list nested 100,000 deep a ``RecursionError``. Rule: one function
(``merkle.tree_integer``) for both, bools refused by the store as before and taken by the Merkle
checks as before; a size past the log's end is named by its size past 128 bits."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_r86b_merkle_index_integers import Integer

from agentgate.audit import merkle
from agentgate.errors import BeyondLogEnd, InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


class Count(int):
    pass


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    log = AuditLog(SQLiteStore(tmp_path / "a.db"), SigningKey(b"\x09" * 32))
    for _ in range(4):
        log.append({"kind": "deny", "principal": "p"})
    return log


def test_an_integer_of_its_own_type_is_a_size_and_an_index_as_for_the_merkle_builders(log: AuditLog) -> None:
    assert log.consistency(Integer(2), Integer(4)) == log.consistency(2, 4)  # type: ignore[arg-type]
    assert log.entry(Integer(1)) == log.entry(1)  # type: ignore[arg-type]
    assert merkle.consistency_ranges(Integer(2), Integer(4)) == merkle.consistency_ranges(2, 4)  # type: ignore[arg-type]


def test_a_bool_is_refused_by_the_store_and_read_as_its_number_by_the_merkle_checks(log: AuditLog) -> None:
    with pytest.raises(InputError, match=r"^audit log: size must be a whole number \(an int\), got True$"):
        log.consistency(True, 4)
    assert merkle.consistency_ranges(True, 4) == merkle.consistency_ranges(1, 4)


def test_what_no_repr_writes_is_refused_by_its_kind(log: AuditLog) -> None:
    with pytest.raises(InputError) as refused:
        log.consistency(_nested(100_000), 4)
    assert (
        str(refused.value)
        == "audit log: size must be a whole number (an int), got a list nested too deep to write"
    )
    with pytest.raises(BeyondLogEnd) as beyond:
        log.consistency(2, Count(10**5000))
    assert str(beyond.value) == "audit log has only 4 entries; size an integer of 16610 bits is past its end"
    with pytest.raises(BeyondLogEnd, match="entry an integer of 16610 bits is past its end"):
        log.entry(10**5000)
