"""``AuditLog.referring`` counts no rows of a healthy log.

Review R91 made ``referring`` compare the log's end with its latest signed checkpoint through
``_absent``, which built its error for an index past the end, ``BeyondLogEnd`` naming the log's
size, on every call: ``COUNT(DISTINCT idx)`` over the whole of ``audit_log`` for an error then
dropped. ``GatedBroker.reconcile`` calls ``referring`` once per lost decision; on a log of 100 000
entries each call went from about 0.1 ms to 27 ms. The size is counted only for the refusal.
"""

from __future__ import annotations

import pytest
from test_audit_r70_verify_reads import _spied
from test_audit_tamper import KEY, ORIGIN, _attack

from agentgate.errors import TamperDetected
from agentgate.store import Store
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}


def _granted(store: Store) -> tuple[AuditLog, int, int]:
    """Denies, an allow and its outcome, signed by a checkpoint: the log, the allow, the outcome."""
    log = AuditLog(store, KEY, ORIGIN)
    log.append_many([{"kind": "deny", **CALL}] * 3)
    allow = log.append({"kind": "allow", **CALL})
    outcome = log.append({"kind": "outcome", "ref": allow, "status": "lease_granted", **CALL})
    log.checkpoint()
    return log, allow, outcome


@pytest.mark.parametrize("refs_indexed", [True, False], ids=["reference-index", "whole-log-read"])
def test_referring_of_a_healthy_log_counts_no_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch, refs_indexed: bool
) -> None:
    log, allow, outcome = _granted(store)
    log.refs_indexed = refs_indexed and log.refs_indexed
    sent = _spied(store, monkeypatch)
    assert [e.index for e in log.referring(allow)] == [outcome]
    assert [s for s in sent if "COUNT(" in s] == []


def test_the_refusal_of_a_short_log_still_names_its_size(store: Store) -> None:
    log, allow, outcome = _granted(store)
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (outcome,)))
    with pytest.raises(
        TamperDetected, match="which has 4 entries, but its latest signed checkpoint covers 5"
    ):
        log.referring(allow)
