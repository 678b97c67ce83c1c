"""Review R89: ``record`` took a ``now`` outside 0 .. 2**40-1 Unix seconds, where ``revoke`` and
``revoke_holder`` refuse it (R85) and ``issue``, ``delegate`` and ``Invocation.sign`` refuse such
times too: ``now=-1`` was stored as the grants' ``recorded_at`` (which orders
``GrantRepository.delegated``, what ``Gate.delegate`` reuses a grant by) and ``now=2**70`` failed
only in the store, as a ``StoreError``. It is now the ``InputError`` naming the range, before
anything is written."""

from __future__ import annotations

import pytest

from agentgate.authority import GrantRepository, issue, record
from agentgate.authority._grant import MAX_TIME
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import Store

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CHAIN = issue(ROOT, AGENT.public, ["tool:x"], ttl=600, now=NOW)


def _recorded_at(store: Store) -> dict[str, int]:
    return {str(g): int(t) for g, t in store.query("SELECT id, recorded_at FROM agentgate_grants")}


@pytest.mark.parametrize("now", [-1, -(2**40), MAX_TIME, 2**70])
def test_a_record_time_outside_a_grants_range_is_refused_and_nothing_recorded(store: Store, now: int) -> None:
    with pytest.raises(InputError) as raised:
        record(GrantRepository(store), CHAIN, now=now)
    assert str(raised.value) == (
        f"a grant's record time lies in 0 .. 2**40-1 Unix seconds; got {now} "
        "(a clock or now= before 1970, or past 2**40)"
    )
    assert _recorded_at(store) == {}


@pytest.mark.parametrize("now", [0, MAX_TIME - 1])
def test_the_ends_of_the_range_are_recorded(store: Store, now: int) -> None:
    record(GrantRepository(store), CHAIN, now=now)
    assert _recorded_at(store) == {CHAIN.id: now}
