"""Review R88: on PostgreSQL the takers of a shared rate bucket queue on its row, as SQLite's
``BEGIN IMMEDIATE`` queues them, so a busy bucket gives tokens instead of errors.

``SharedRateLimits.try_take`` read the row unlocked at READ COMMITTED, then wrote it back only if
it was unchanged. Every other taker that committed in between made the swap miss; after 20 misses
it raised ``StoreError("too much contention")``, which the scheduler gives up as
``store_unavailable``: calls refused with a million tokens in the bucket. The read now locks the
row (``FOR UPDATE``), so a taker that comes in between waits for the first one's commit.

Deterministic: another process's taker is let in between the read and the swap, every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import agentgate.store.leases as leases
from agentgate.store import Store, open_store
from agentgate.store.leases import SharedRateLimits

pytestmark = pytest.mark.postgres

KEY = "tool:pay"
WAIT_S = 10.0  # bound on every wait: only a bug comes near it
_LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


@pytest.fixture
def stores(postgres_url: str) -> Iterator[tuple[Store, Store, Store]]:
    """Two takers' connections (two processes) and one that watches the server's lock waits."""
    opened = (open_store(postgres_url), open_store(postgres_url), open_store(postgres_url))
    yield opened
    for store in opened:
        store.close()


def _done_or_waiting_for_a_lock(thread: threading.Thread, watch: Store) -> None:
    deadline = time.monotonic() + WAIT_S
    while thread.is_alive() and not watch.query(_LOCK_WAITERS)[0][0]:
        assert time.monotonic() < deadline, "the thread neither finished nor waited for a lock"
        time.sleep(0.005)


def test_a_taker_between_the_read_and_the_swap_waits_and_both_take_a_token(
    stores: tuple[Store, Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs, watch = stores
    me, other = SharedRateLimits(mine), SharedRateLimits(theirs)
    assert me.try_take(KEY, 1e-6, 1000) == 0.0  # the bucket exists, 999 tokens in it
    taker = threading.current_thread()
    others: list[float] = []
    threads: list[threading.Thread] = []
    read = leases._stored_number

    def read_then_let_another_take(value: object, kind: str, key: str, field: str) -> float:
        if field == "tokens" and threading.current_thread() is taker:
            thread = threading.Thread(target=lambda: others.append(other.try_take(KEY, 1e-6, 1000)))
            thread.start()
            threads.append(thread)
            _done_or_waiting_for_a_lock(thread, watch)
        return read(value, kind, key, field)

    monkeypatch.setattr(leases, "_stored_number", read_then_let_another_take)
    assert me.try_take(KEY, 1e-6, 1000) == 0.0
    monkeypatch.setattr(leases, "_stored_number", read)
    for thread in threads:
        thread.join(WAIT_S)
    assert len(threads) == 1  # the first swap took: the other taker waited for it
    assert others == [0.0]
    tokens = mine.query("SELECT tokens FROM agentgate_rate_buckets")[0][0]
    assert 997.0 <= tokens < 997.001  # three tokens taken, none lost, none twice
