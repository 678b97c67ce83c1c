"""Review R84: ``consistency_ranges`` followed RFC 9162's SUBPROOF as a recursion, one call per
bit of ``size2``, and ``AuditLog.consistency`` computed the ranges before checking ``size2``
against the log's end: ``consistency(1, 2**1200)`` raised ``RecursionError``, not the
``BeyondLogEnd`` docs/audit-format.md promises for a size past the end. Now the bound is checked
first, and the ranges are computed by a loop, the same ranges for every size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgate.audit.merkle import consistency_ranges
from agentgate.errors import BeyondLogEnd, InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


@pytest.mark.parametrize("size2", [2**63, 2**1200, 2**5000])
def test_a_size_far_past_the_end_is_beyond_the_log(tmp_path: Path, size2: int) -> None:
    log = AuditLog(SQLiteStore(tmp_path / "a.db"), SigningKey(b"\x03" * 32))
    for _ in range(5):
        log.append({"kind": "allow", "principal": "p"})
    with pytest.raises(BeyondLogEnd, match="audit log has only 5 entries"):
        log.consistency(1, size2)
    with pytest.raises(InputError, match="no consistency proof from size 7 to size 6"):
        log.consistency(7, 6)  # sizes out of order, both past the end: the order is named
    assert len(log.consistency(2, 5)) == len(consistency_ranges(2, 5))


def test_the_ranges_of_huge_sizes_are_computed_without_recursion() -> None:
    ranges = consistency_ranges(1, 2**5000)
    assert ranges[0] == (1, 2) and ranges[-1] == (2**4999, 2**5000) and len(ranges) == 5000


def _recursive(m: int, lo: int, hi: int, complete: bool, out: list[tuple[int, int]]) -> None:
    """RFC 9162 2.1.4.1 SUBPROOF as the RFC writes it (the split: the largest power of two below)."""
    n = hi - lo
    if m == n:
        if not complete:
            out.append((lo, hi))
        return
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        _recursive(m, lo, lo + k, complete, out)
        out.append((lo + k, hi))
    else:
        _recursive(m - k, lo + k, hi, False, out)
        out.append((lo, lo + k))


@given(st.integers(1, 2**62).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))))
def test_the_ranges_are_the_rfc_s(sizes: tuple[int, int]) -> None:
    size1, size2 = sizes
    expected: list[tuple[int, int]] = []
    _recursive(size1, 0, size2, True, expected)
    assert consistency_ranges(size1, size2) == expected
