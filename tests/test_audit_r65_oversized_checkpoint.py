"""Review R65: a signed checkpoint of far more entries than the log holds (the log key's holder
signed it, or the log's newest entries were deleted under it) is refused as tampering by
``explain`` and ``prove`` at once, with both sizes named, instead of building a proof against it
(agentgate/store/audit/_proofs.py)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x65" * 32)
ORIGIN = "r65.example/audit"
FAR = 1 << 30
"""A signed size far past the log: 2**20 blocks of the node cache, none of them in the log."""
DELETED = " (entries deleted, or the database restored from an older copy)"


def _log(store: Store, n: int = 7) -> AuditLog:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(n):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:t", "budget_delta": i})
    log.checkpoint()
    return log


def _store_signed(store: Store, size: int) -> str:
    """Store a checkpoint of ``size`` entries signed by the log key (an insert the triggers allow)."""
    root = b"\x11" * 32
    note = sign_checkpoint(Checkpoint(ORIGIN, size, root), KEY)
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (size, root, note, "2026-12-04T00:00:00.000000Z"),
        )
    return note


def _peak_bytes(call: Callable[[], object]) -> tuple[Exception | None, int]:
    """What ``call`` raised (``None`` if nothing) and the most memory it held, in bytes."""
    tracemalloc.start()
    error: Exception | None = None
    try:
        call()
    except Exception as exc:  # returned for the test to assert on
        error = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, peak


def test_explain_refuses_a_signed_checkpoint_far_past_the_log_without_asking_the_cache_for_it(
    store: Store,
) -> None:
    """Review R65: ``explain`` asked the node cache for every block of 1024 entries up to the
    latest checkpoint's signed size, whether the log held them or not: a set of 2**20 block
    numbers for a size of 2**30, and for 2**40 it took gigabytes of memory and never ended. Rule:
    a checkpoint larger than the log is tampering, refused before any proof is built, naming both
    sizes, in memory that does not grow with the size the checkpoint claims."""
    log = _log(store)
    _store_signed(store, FAR)
    error, peak = _peak_bytes(lambda: log.explain(3))
    assert peak < 4 << 20, f"explain held {peak} bytes for a log of 7 entries"
    assert isinstance(error, TamperDetected)
    assert str(error) == f"audit log has 7 entries, but its latest signed checkpoint covers {FAR}{DELETED}"


def test_prove_against_a_given_checkpoint_far_past_the_log_is_refused_in_small_memory(
    tmp_path: Path,
) -> None:
    """Review R65: ``AuditLog.prove(index, note)`` with a signed note far larger than the log asked
    the node cache for every block up to its size. Rule: refused as ``TamperDetected`` naming both
    sizes, memory independent of the size claimed; an index past the log's end is still
    ``BeyondLogEnd`` (documented)."""
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = _log(store)
    note = sign_checkpoint(Checkpoint(ORIGIN, FAR, b"\x11" * 32), KEY)
    error, peak = _peak_bytes(lambda: log.prove(3, note))
    assert peak < 4 << 20, f"prove held {peak} bytes for a log of 7 entries"
    assert isinstance(error, TamperDetected)
    assert str(error) == f"audit log has 7 entries, but the checkpoint given covers {FAR}{DELETED}"
    store.close()


@pytest.mark.parametrize("deleted", [1, 5])
def test_explain_after_the_newest_entries_were_deleted_names_both_sizes(store: Store, deleted: int) -> None:
    """Review R65: the newest entries deleted under a stored checkpoint (the triggers dropped):
    ``explain`` of an entry still there is refused as tampering naming how many entries the log
    has and how many the checkpoint signs."""
    log = _log(store, 12)
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            tx.execute("DROP TRIGGER IF EXISTS audit_log_no_delete")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        tx.execute("DELETE FROM audit_log WHERE idx >= ?", (12 - deleted,))
    with pytest.raises(TamperDetected) as caught:
        log.explain(3)
    assert str(caught.value) == (
        f"audit log has {12 - deleted} entries, but its latest signed checkpoint covers 12{DELETED}"
    )
