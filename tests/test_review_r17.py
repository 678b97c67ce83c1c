"""Review r17 of the GPU broker, the cross-process concurrency leases and the simulator.

Each test names the defect it pins: it failed on the code before its fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from agentgate.errors import StoreError
from agentgate.store import Store, Transaction
from agentgate.store.leases import LeaseManager

# --- cross-process concurrency leases (agentgate/store/leases.py) ---------------------------------


class OutageStore:
    """``store`` with one injected fault: while ``down``, a transaction raises ``StoreError``
    (what a PostgreSQL restart or a locked SQLite file does to one call)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        if self.down:
            raise StoreError("the store is unreachable (injected)")
        with self._store.transaction(immediate=immediate) as tx:
            yield tx


def test_a_slot_whose_release_failed_is_not_renewed_by_the_heartbeat_and_comes_back(store: Store) -> None:
    """The heartbeat renewed every row of its holder (``WHERE holder = ?``), so a slot whose
    release failed (the store was unreachable for that one call) was renewed for as long as the
    process held any other lease: the scheduler counts it ``lease_not_released`` and relies on it
    expiring within ``lease_ttl_s``, but it never did, and the shared limit lost a slot for good."""
    now = [1000.0]
    flaky = OutageStore(store)
    manager = LeaseManager(flaky, ttl_s=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    other = LeaseManager(store, ttl_s=10.0, clock=lambda: now[0])
    try:
        busy = manager.try_acquire("tool:busy", 1)  # held all along: the heartbeat keeps renewing
        lost = manager.try_acquire("tool:lost", 1)
        assert busy is not None and lost is not None
        flaky.down = True
        with pytest.raises(StoreError):
            manager.release(lost)
        flaky.down = False
        assert manager.held() == 1
        for _ in range(6):  # heartbeats, each ttl_s / 3 apart: 20 s in all
            now[0] += 10.0 / 3
            assert manager.renew() == 1  # the lease it holds, not the one it gave up
        assert [row.key for row in manager.rows("tool:busy")] == ["tool:busy"]
        assert manager.rows("tool:lost") == []
        assert other.try_acquire("tool:lost", 1) is not None  # the slot came back
    finally:
        manager.close()
        other.close()
