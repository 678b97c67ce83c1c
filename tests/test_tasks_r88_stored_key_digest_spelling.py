"""Review R88 (unconfirmed item, confirmed): the store keeps a lease, rate bucket or breaker key
with a NUL, or longer than 1,024 bytes, under ``sha256:HEX`` of it, and kept every other key as
it is: a ``breaker_key`` (or tool name) spelled as that digest shared the long key's row, its
breaker state, slots and rate bucket. A key starting with ``sha256:`` is now stored by digest
too, so no key is stored as another's digest.

Real components: a SQLite store, ``SharedBreakers`` and ``LeaseManager``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from agentgate.store import SQLiteStore
from agentgate.store.leases import LeaseManager, SharedBreakers, stored_key

_LONG = "tool:" + "x" * 2000
_SPELLED = "sha256:" + hashlib.sha256(_LONG.encode("utf-8")).hexdigest()


def test_a_key_spelled_as_a_long_keys_digest_has_a_row_of_its_own() -> None:
    assert stored_key(_LONG) != stored_key(_SPELLED)
    assert stored_key(_SPELLED).startswith("sha256:")
    assert stored_key("tool:short") == "tool:short"  # other keys are stored as before


def test_the_spelled_key_neither_reads_the_long_keys_breaker_nor_takes_its_slot(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        breakers = SharedBreakers(store)
        assert breakers.publish(_LONG, "open", 1000.0)
        assert breakers.read(_SPELLED) is None
        found = breakers.read(_LONG)
        assert found is not None and found.state == "open"

        manager = LeaseManager(store, ttl_s=30)
        try:
            assert manager.try_acquire(_LONG, 1) is not None
            assert manager.try_acquire(_SPELLED, 1) is not None
        finally:
            manager.close()
    finally:
        store.close()
