"""Review R85: ``revoke`` and ``revoke_holder`` refuse a ``now`` outside 0 .. 2**40-1 Unix
seconds (``InputError`` naming the range and the time, nothing revoked), as ``issue`` and
``delegate`` refuse a grant's times outside that range. Until R85 ``revoke(repo, id, now=-1)``
recorded a revocation at -1, before 1970."""

from __future__ import annotations

import pytest

from agentgate.authority import GrantRepository, issue, record, revoke, revoke_holder
from agentgate.authority._grant import MAX_TIME
from agentgate.errors import InputError, TokenFormatError
from agentgate.keys import SigningKey
from agentgate.store import Store

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()


def _revoked_at(store: Store) -> dict[str, int]:
    return {str(g): int(t) for g, t in store.query("SELECT grant_id, revoked_at FROM agentgate_revocations")}


@pytest.mark.parametrize("now", [-1, -(2**40), MAX_TIME, 2**62])
def test_a_time_outside_a_grants_range_is_refused_and_nothing_revoked(store: Store, now: int) -> None:
    repo = GrantRepository(store)
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=600)
    record(repo, chain)
    said = f"a revocation time lies in 0 .. 2**40-1 Unix seconds; got {now} (a clock or now= before 1970, or past 2**40)"
    with pytest.raises(InputError) as raised:
        revoke(repo, chain.id, now=now)
    assert str(raised.value) == said
    with pytest.raises(InputError) as raised:
        revoke_holder(repo, AGENT.public, now=now)
    assert str(raised.value) == said
    assert _revoked_at(store) == {}
    with pytest.raises(TokenFormatError, match=r"grant times lie in 0 \.\. 2\*\*40-1"):
        issue(ROOT, AGENT.public, ["tool:x"], ttl=600, now=now)  # the range issue refuses


def test_the_ends_of_the_range_are_recorded(store: Store) -> None:
    repo = GrantRepository(store)
    revoke(repo, "a" * 64, now=0)
    revoke(repo, "b" * 64, now=MAX_TIME - 1)
    assert _revoked_at(store) == {"a" * 64: 0, "b" * 64: MAX_TIME - 1}
