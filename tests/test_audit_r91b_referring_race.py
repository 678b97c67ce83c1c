"""``AuditLog.referring`` is not fooled by another writer appending while it reads.

Review R91 made ``referring`` refuse a log shorter than its latest signed checkpoint. It read the
log's end, then again in ``_absent``, then the checkpoint: another writer appending between the two
ends made a healthy log ``TamperDetected`` (``entry 2 is missing from the log, which holds entries
up to index 2 (its row was deleted)``), and one appending and signing a checkpoint between the end
and the checkpoint did too (``which has 4 entries, but its latest signed checkpoint covers 4``).
``GatedBroker.reconcile`` runs while a Gate appends on other threads or processes, and stopped on
it. The checkpoint is now read first, then the end once: entries commit before a checkpoint that
covers them, and no end goes back, so only a log that lost rows is shorter than that checkpoint.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_audit_tamper import KEY, ORIGIN

from agentgate.store import Store
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}


def _writer_between_reads(store: Store, monkeypatch: pytest.MonkeyPatch, sign: bool) -> None:
    """From now on, after each read of the log's end or of its latest checkpoint row, another
    writer (an ``AuditLog`` of its own) appends an entry, and signs a checkpoint when ``sign``:
    every interleaving of its appends with the reader's reads is one of these."""
    other = AuditLog(store, KEY, ORIGIN)
    real = store.query
    writing = False

    def query(sql: str, params: Any = ()) -> Any:
        nonlocal writing
        rows = real(sql, params)
        if not writing and ("MAX(idx) FROM audit_log" in sql or "FROM audit_checkpoints" in sql):
            writing = True
            try:
                other.append({"kind": "deny", **CALL})
                if sign:
                    other.checkpoint()
            finally:
                writing = False
        return rows

    monkeypatch.setattr(store, "query", query)


@pytest.mark.parametrize("sign", [False, True], ids=["appends", "appends-and-signs"])
@pytest.mark.parametrize("refs_indexed", [True, False], ids=["reference-index", "whole-log-read"])
def test_referring_while_another_writer_appends_lists_the_entries(
    store: Store, monkeypatch: pytest.MonkeyPatch, sign: bool, refs_indexed: bool
) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    log.refs_indexed = refs_indexed and log.refs_indexed
    allow = log.append({"kind": "allow", **CALL})
    outcome = log.append({"kind": "outcome", "ref": allow, "status": "lease_granted", **CALL})
    log.checkpoint()
    _writer_between_reads(store, monkeypatch, sign)
    assert [e.index for e in log.referring(allow)] == [outcome]
    monkeypatch.undo()
    assert log.verify().ok
