"""Review R85's regression review: a ``now`` too long for Python to write (``10**5000``) is refused
by ``revoke``, ``revoke_holder`` and ``issue`` with the typed error naming the range, the time
quoted by its size. The range check R85 gave ``revoke`` wrote the time whole, as ``issue``'s
refusal did: a bare ``ValueError`` (Python writes no integer past 4,300 digits), where before R85
``revoke`` gave the store's ``StoreError``."""

from __future__ import annotations

import pytest

from agentgate.authority import GrantRepository, issue, record, revoke, revoke_holder
from agentgate.errors import InputError, TokenFormatError
from agentgate.keys import SigningKey
from agentgate.store import Store

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
HUGE = 10**5000


@pytest.mark.parametrize("now", [HUGE, -HUGE], ids=["huge", "minus-huge"])
def test_a_time_too_long_to_write_is_refused_by_its_size(store: Store, now: int) -> None:
    repo = GrantRepository(store)
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=600)
    record(repo, chain)
    size = f"an integer of {now.bit_length()} bits"
    with pytest.raises(InputError, match=f"2\\*\\*40-1 Unix seconds; got {size}"):
        revoke(repo, chain.id, now=now)
    with pytest.raises(InputError, match=f"got {size}"):
        revoke_holder(repo, AGENT.public, now=now)
    with pytest.raises(TokenFormatError, match=f"not-before {size}"):
        issue(ROOT, AGENT.public, ["tool:x"], ttl=600, now=now)
    assert store.query("SELECT COUNT(*) FROM agentgate_revocations")[0][0] == 0
