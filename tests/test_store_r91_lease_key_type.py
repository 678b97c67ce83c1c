"""A lease, rate bucket or breaker key that is not text (``5``, ``None``, ``b"k"``, a tuple) is
refused with an ``InputError`` naming the key and its type, before anything is read or written,
on both stores (review R91), as every other argument of these calls is. Until then
``stored_key`` called ``key.startswith`` on it: a bare ``AttributeError`` or ``TypeError`` out of
``SharedRateLimits.try_take``, ``SharedBreakers.publish``/``read``/``probe_guard``/``reopen`` and
``LeaseManager.try_acquire``/``rows``, which a scheduler, failing closed only on ``StoreError``,
did not expect.

Real components: each store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.leases import LeaseManager, SharedBreakers, SharedRateLimits

KEYS = [5, None, b"tool:x", ("tool:x",)]
IDS = ["int", "none", "bytes", "tuple"]
CALLS: dict[str, Callable[[Store, object], object]] = {
    "try_take": lambda s, k: SharedRateLimits(s).try_take(k, 1.0, 1),  # type: ignore[arg-type]
    "publish": lambda s, k: SharedBreakers(s).publish(k, "open", 1.0),  # type: ignore[arg-type]
    "read": lambda s, k: SharedBreakers(s).read(k),  # type: ignore[arg-type]
    "probe_key": lambda s, k: SharedBreakers.probe_key(k),  # type: ignore[arg-type]
    "probe_guard": lambda s, k: SharedBreakers.probe_guard(k, 1.0),  # type: ignore[arg-type]
    "reopen": lambda s, k: SharedBreakers.reopen(k, 1.0),  # type: ignore[arg-type]
    "try_acquire": lambda s, k: LeaseManager(s).try_acquire(k, 1),  # type: ignore[arg-type]
    "rows": lambda s, k: LeaseManager(s).rows(k),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("key", KEYS, ids=IDS)
@pytest.mark.parametrize("call", list(CALLS))
def test_a_key_that_is_not_text_is_refused_naming_its_type_and_nothing_is_written(
    store: Store, call: str, key: object
) -> None:
    SharedRateLimits(store)  # the tables, which the static calls do not make
    with pytest.raises(InputError, match=rf"key must be text \(str\), got (a {type(key).__name__}|{key!r})$"):
        CALLS[call](store, key)
    for table in ("agentgate_leases", "agentgate_rate_buckets", "agentgate_breakers"):
        assert store.query(f"SELECT COUNT(*) FROM {table}")[0][0] == 0


def test_a_text_key_still_takes_its_token_slot_and_breaker_row(store: Store) -> None:
    assert SharedRateLimits(store).try_take("tool:x", 1.0, 1) == 0.0
    assert SharedBreakers(store).publish("tool:x", "open", 1.0)
    assert SharedBreakers(store).read("tool:x") is not None
    leases = LeaseManager(store)
    try:
        assert leases.try_acquire("tool:x", 1) is not None
    finally:
        leases.close()
