"""Review R84: ``verify`` looked only at the first and last index of each batch of rows it read,
taking the rows between as ordered and unique. In ``audit_log`` made again without its primary key
(or with it dropped), entry 2's row moved to index 1 left the rows 0, 1, 1, 3: the batch's ends
were 0 and 3, the count of rows below the log's size (4) matched it, the root folded in the rows'
order matched the checkpoint, and ``verify`` said intact while ``show`` and ``explain`` found no
entry 2. Now every row's index is compared with its position in the pass, and the gap and the
second row of index 1 are both reported, as docs/audit-format.md says.
"""

from __future__ import annotations

import pytest
from test_audit_tamper import _attack, _drop_primary_key, _fill

from agentgate.store import Store


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed", "uncovered"])
def test_a_duplicate_beside_a_gap_is_reported(store: Store, checkpointed: bool) -> None:
    log = _fill(store, 4)
    if checkpointed:
        log.checkpoint()
    _drop_primary_key(store)
    _attack(store, ("UPDATE audit_log SET idx = 1 WHERE idx = 2", ()))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 1
    assert "entry 2: missing (the next stored index is 3)" in report.problems, report.problems
    assert any(p.startswith("entry 1: 2 rows hold this index") for p in report.problems), report.problems


def test_an_intact_log_still_verifies_across_batches(store: Store) -> None:
    """The comparison covers every batch (the first is 16 rows, the next larger)."""
    log = _fill(store, 40)
    log.checkpoint()
    report = log.verify()
    assert report.ok and report.size == 40 and report.problems == ()
