"""State of a process that runs for weeks stays bounded (the policy
index's quotas by resource, the keyring, the nonce table), and what is pruned is only what no
decision still needs."""

from __future__ import annotations

import time

from agentgate.capabilities import Call
from agentgate.keys import Keyring, SigningKey
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.policy._index import QUOTA_CACHE_SIZE
from agentgate.store import Store
from agentgate.store.grants import GrantRepository

GPU_POLICY = """
version: 1
principals:
  svc: {kind: service, roles: [batch]}
roles:
  batch:
    kind: service
    capabilities:
      - resource: "gpu:*"
    ttl_s: 600
quotas:
  leases: {principal: svc, window_s: 3600, limit: 100, resources: ["gpu:h100"]}
"""


def test_quotas_by_resource_stay_bounded_under_many_distinct_resources() -> None:
    """A rule on ``gpu:*`` allows any GPU type a caller names; each distinct name used to add an
    entry to the principal's quota cache for good (200,000 names: 19 MiB, never freed)."""
    index = PolicyIndex(parse_policy(GPU_POLICY, source="gpu.yaml"))
    for i in range(QUOTA_CACHE_SIZE + 500):
        assert index.evaluate("svc", Call(f"gpu:t{i}", "lease", {})).allowed
    assert len(index._principals["svc"].quota_cache) <= QUOTA_CACHE_SIZE
    # Emptying the cache changes no answer: the quotas that count a resource are found again.
    counted = index.evaluate("svc", Call("gpu:h100", "lease", {}))
    assert [q.name for q in counted.quotas] == ["leases"]
    assert index.evaluate("svc", Call("gpu:b200", "lease", {})).quotas == ()


def test_a_keyring_lookup_of_an_unknown_id_does_not_add_it() -> None:
    """``Keyring.get`` decodes a did:key it was not given (it is self-describing) but used to keep
    it: ring membership then said "known" for every id ever looked up, and a caller presenting
    fresh ids grew the ring without end."""
    known = SigningKey.generate()
    ring = Keyring([known.public])
    strangers = [SigningKey.generate() for _ in range(50)]
    for key in strangers:
        assert ring.get(key.did).raw == key.public.raw
    assert known.did in ring
    assert not any(key.did in ring for key in strangers)


def _nonces(store: Store) -> list[str]:
    return sorted(str(n) for (n,) in store.query("SELECT nonce FROM agentgate_nonces"))


AGENT = "did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru"


def test_expired_nonces_are_pruned_by_short_lived_processes(sqlite_store: Store) -> None:
    """docs/token-format.md: a nonce is kept until an hour after its invocation's expiry. Each
    ``agentgate grant check`` opens its own repository and records one nonce; none of them ever
    deleted an expired row, so the table grew by one row per check for good."""
    now = int(time.time())
    first = GrantRepository(sqlite_store)
    try:
        assert first.consume_nonce(AGENT, "expired", now - 7200, ["g"]) == "fresh"
    finally:
        first.close()
    for i in range(3):  # three short-lived processes, one decision each
        repo = GrantRepository(sqlite_store)
        try:
            assert repo.consume_nonce(AGENT, f"live-{i}", now + 330, ["g"]) == "fresh"
        finally:
            repo.close()
    assert "expired" not in _nonces(sqlite_store)


def test_a_replay_inside_the_window_is_refused_after_a_prune(sqlite_store: Store) -> None:
    now = int(time.time())
    repo = GrantRepository(sqlite_store)
    try:
        assert repo.consume_nonce(AGENT, "live", now + 330, ["g"]) == "fresh"
        assert repo.consume_nonce(AGENT, "old", now - 3601, ["g"]) == "fresh"
        later = GrantRepository(sqlite_store)  # another process: its first nonce prunes
        try:
            assert later.consume_nonce(AGENT, "next", now + 330, ["g"]) == "fresh"
            assert _nonces(sqlite_store) == ["live", "next"]
            assert later.consume_nonce(AGENT, "live", now + 330, ["g"]) == "replay"
        finally:
            later.close()
        assert repo.consume_nonce(AGENT, "live", now + 330, ["g"]) == "replay"
    finally:
        repo.close()
