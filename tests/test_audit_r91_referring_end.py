"""``referring`` refuses a log shorter than its latest signed checkpoint, as ``explain`` does.

Until review R91 ``referring`` compared the log's end with no checkpoint: with a call's outcome,
the newest entry, deleted under a checkpoint that signs it, it refused only while ``audit_refs``
still named the row. Reading the whole log (no complete reference index), or with the
``audit_refs`` row deleted too, it returned no entry without a word, while ``explain`` of the same
allow refused (``its latest signed checkpoint covers 5``): ``GatedBroker.reconcile`` then read a
granted lease as one that never held GPUs and returned its reservation.
"""

from __future__ import annotations

import pytest
from test_audit_tamper import KEY, ORIGIN, _attack

from agentgate.errors import TamperDetected
from agentgate.store import Store
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}
SHORT = (
    "audit log: entry 4 is missing from the log, which has 4 entries, but its latest signed "
    "checkpoint covers 5 (entries deleted, or the database restored from an older copy)"
)


def _granted_then_deleted(store: Store, *also: tuple[str, tuple[object, ...]]) -> tuple[AuditLog, int]:
    """Three denies, an allow and its ``lease_granted`` outcome (the newest entry), all signed by
    one checkpoint; then the outcome's row deleted (with ``also``). The log and the allow."""
    log = AuditLog(store, KEY, ORIGIN)
    log.append_many([{"kind": "deny", **CALL}] * 3)
    allow = log.append({"kind": "allow", **CALL})
    outcome = log.append({"kind": "outcome", "ref": allow, "status": "lease_granted", **CALL})
    log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (outcome,)), *also)
    return log, allow


@pytest.mark.parametrize(
    ("refs_indexed", "also"),
    [
        (True, ()),
        (False, ()),
        (True, (("DELETE FROM audit_refs WHERE idx = ?", (4,)),)),
    ],
    ids=["reference-index", "whole-log-read", "reference-index-row-deleted-too"],
)
def test_referring_refuses_a_deleted_newest_outcome_as_explain_does(
    store: Store, refs_indexed: bool, also: tuple[tuple[str, tuple[object, ...]], ...]
) -> None:
    log, allow = _granted_then_deleted(store, *also)
    log.refs_indexed = refs_indexed and log.refs_indexed  # False: a role that could not build audit_refs
    with pytest.raises(TamperDetected) as explained:
        log.explain(allow)
    assert "its latest signed checkpoint covers 5" in str(explained.value)
    with pytest.raises(TamperDetected) as referred:
        log.referring(allow)
    assert str(referred.value) == SHORT


def test_referring_of_any_entry_refuses_a_log_shorter_than_its_checkpoint(store: Store) -> None:
    """As ``explain`` of any entry does: nothing left in the log says what the deleted row named."""
    log, _allow = _granted_then_deleted(store)
    with pytest.raises(TamperDetected) as referred:
        log.referring(0)
    assert str(referred.value) == SHORT


def test_referring_still_lists_entries_appended_after_the_checkpoint(store: Store) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    allow = log.append({"kind": "allow", **CALL})
    log.checkpoint()
    outcome = log.append({"kind": "outcome", "ref": allow, "status": "lease_granted", **CALL})
    assert [e.index for e in log.referring(allow)] == [outcome]
