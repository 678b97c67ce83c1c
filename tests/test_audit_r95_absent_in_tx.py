"""An entry looked up in a caller's transaction and not found is explained from that transaction.

Until the session after review R94 ``AuditLog.entry(index, tx)`` read the row in ``tx`` but, when
it was absent, read the log's end, its size and its latest checkpoint on another connection
(``_absent``). A gate carrying outcomes holds the audit append lock in ``tx`` when it asks whether
an outcome an earlier, rolled-back transaction carried is in the log (``_in_log``): on PostgreSQL
that other connection's read queued behind any session waiting for the table (a migration, a
``LOCK TABLE``, CI's test dropping a trigger), which waited for ``tx``'s own lock: a deadlock no
server check sees, ended by the 10 s lock timeout as "the store is busy" (the failed CI run of
stop 76). It also took a second pooled connection per transaction, and said a size that left out
the transaction's own entries.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from test_audit_tamper import KEY, ORIGIN, _attack

from agentgate.errors import BeyondLogEnd, TamperDetected
from agentgate.store import Store
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}


def _log(store: Store) -> AuditLog:
    log = AuditLog(store, KEY, ORIGIN)
    log.append_many([{"kind": "deny", **CALL}] * 2)
    return log


def test_a_missing_entry_in_a_transaction_counts_the_transactions_own_entries(store: Store) -> None:
    log = _log(store)
    with store.transaction() as tx:
        log.append({"kind": "allow", **CALL}, tx)
        log.append({"kind": "deny", **CALL}, tx)
        with pytest.raises(BeyondLogEnd) as past:
            log.entry(4, tx)
        assert (past.value.requested, past.value.size) == (4, 4)
        assert str(past.value) == "audit log has only 4 entries; entry 4 is past its end"
    with pytest.raises(BeyondLogEnd) as after:
        log.entry(4)
    assert after.value.size == 4


def test_a_deleted_entry_found_in_a_transaction_is_still_tampering(store: Store) -> None:
    log = _log(store)
    log.append({"kind": "allow", **CALL})
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (1,)))
    with store.transaction() as tx, pytest.raises(TamperDetected, match="entry 1 is missing"):
        log.entry(1, tx)


@pytest.mark.postgres
def test_a_missing_entry_in_a_transaction_does_not_wait_behind_a_session_queued_for_the_log(
    postgres_url: str,
) -> None:
    """The gate's case: its transaction reads the log (holding it against a session that wants the
    whole table), another session queues for the table, then the lookup misses. PostgreSQL's
    alone: SQLite's readers never wait for a writer (WAL)."""
    from agentgate.store._postgres import PostgresStore

    with contextlib.closing(PostgresStore(postgres_url)) as store:
        _queued_behind(store, postgres_url)


def _queued_behind(store: Store, url: str) -> None:
    import psycopg

    log = _log(store)
    queued = threading.Event()
    locker_error: list[BaseException] = []

    def lock_the_table() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '20s'")
                with conn.transaction():
                    queued.set()
                    conn.execute("LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE")
        except BaseException as exc:  # shown by the test, not lost in the thread
            locker_error.append(exc)

    locker = threading.Thread(target=lock_the_table)
    with psycopg.connect(url, autocommit=True) as watcher:
        with store.transaction() as tx:
            assert log.entry(0, tx).kind == "deny"  # tx now holds the table against the locker
            locker.start()
            queued.wait(10)
            deadline = time.monotonic() + 10
            while not watcher.execute(
                "SELECT 1 FROM pg_locks WHERE relation = 'audit_log'::regclass AND NOT granted"
            ).fetchall():
                assert time.monotonic() < deadline, "the locker never queued for audit_log"
                time.sleep(0.02)
            # Read on another connection, the lookup waited out the store's 10 s lock timeout
            # and failed as "busy" (StoreError); in tx it waits on nothing.
            with pytest.raises(BeyondLogEnd) as past:
                log.entry(7, tx)
        locker.join(30)
    assert not locker_error, locker_error
    assert past.value.size == 2
