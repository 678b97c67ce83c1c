"""The gateway's cache of parsed chains: bounded in token bytes, least recently used
out first, and never filled by callers who do not authenticate.

A parsed chain takes up to about 20 times its token's bytes, and a token may be 32 KiB: 1024
entries of forged tokens held about 500 MiB before the cache kept only verified chains, within
2 MiB of token text.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import MAX_TOKEN_BYTES, Chain, Invocation, delegate, issue
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  m: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities: [{{resource: model:m}}]
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
"""
CALL = Call.model("m", {"max_tokens": 1})
BUDGET = 2 * 1024 * 1024
"""The token bytes the gateway keeps parsed chains for (docs/gateway.md)."""
CONSTRAINED = ["model:m"] + [
    f"tool:t{i:02d}.x?" + "&".join(f"a{j}<={j}" for j in range(12)) for i in range(15)
]
"""Many constrained capabilities: the shape whose parsed form is largest for its token's size."""
LONG = ["model:m"] + [f"tool:t{i:02d}.{'x' * 180}" for i in range(15)]
"""Long names: a large token quick to verify."""


def large_chain(issuer: SigningKey, first: SigningKey, caps: list[str] = LONG) -> tuple[Chain, SigningKey]:
    """A chain of ``caps`` from ``issuer`` to ``first`` delegated on to fresh keys until its
    token is close to ``MAX_TOKEN_BYTES`` (over 24 KiB); and the key of its holder. Every link is
    dated from one instant: each expires a second before its parent, which a link dated a second
    later (a loaded machine) would not."""
    now = time.time()
    chain, holder = issue(issuer, first.did, caps, ttl=3600, max_depth=15, now=now), first
    while True:
        key = SigningKey.generate()
        try:  # delegate refuses a chain past MAX_TOKEN_BYTES (review R56; it used to sign one)
            longer = delegate(chain, holder, key.did, caps, ttl=3500 - len(chain.links), now=now)
        except TokenFormatError:
            assert 24 * 1024 < len(chain.token) <= MAX_TOKEN_BYTES
            return chain, holder
        chain, holder = longer, key


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[GatewayGate, SigningKey, SigningKey]]:
    """A gateway gate, its trust anchor's key and its agent's key."""
    root, agent = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, agent=agent.did), source="p.yaml")
    gateway = GatewayGate(policy, SQLiteStore(tmp_path / "ag.db"))
    try:
        yield gateway, root, agent
    finally:
        gateway.close()


def send(gate: GatewayGate, chain: Chain, key: SigningKey) -> int:
    """The status of one call of model ``m`` with ``chain``, signed by ``key``."""
    invocation = Invocation.sign(key, chain, CALL).encode()
    return gate.authorize_invocation(chain.token, invocation, CALL, (1, 1)).status


def kept_bytes(gate: GatewayGate) -> int:
    return sum(len(token) for token in gate._parsed)


def test_chains_that_fail_verification_are_not_kept(
    gate: tuple[GatewayGate, SigningKey, SigningKey],
) -> None:
    gateway, _, agent = gate
    stranger = SigningKey.generate()  # not a trust anchor: its chains parse but never verify
    for _ in range(8):
        chain, holder = large_chain(stranger, agent, CONSTRAINED)
        assert send(gateway, chain, holder) == 401
        # A readable chain with an unreadable invocation: parsed, refused before any decision.
        assert gateway.authorize_invocation(chain.token, "inv1.x.y", CALL, (1, 1)).status == 401
    assert len(gateway._parsed) == 0


def test_a_verified_chain_is_kept_and_served_from_the_cache(
    gate: tuple[GatewayGate, SigningKey, SigningKey],
) -> None:
    gateway, root, agent = gate
    chain = issue(root, agent.did, ["model:m"], ttl=600)
    assert send(gateway, chain, agent) == 200
    kept = gateway._parsed[chain.token]
    assert send(gateway, chain, agent) == 200
    assert gateway._parsed[chain.token] is kept and len(gateway._parsed) == 1


def test_kept_chains_stay_within_the_byte_budget(gate: tuple[GatewayGate, SigningKey, SigningKey]) -> None:
    gateway, root, agent = gate
    chains = [large_chain(root, agent) for _ in range(100)]  # over 2.4 MiB of verified tokens
    assert sum(len(chain.token) for chain, _ in chains) > BUDGET
    for chain, holder in chains:
        assert send(gateway, chain, holder) == 200
        assert kept_bytes(gateway) <= BUDGET
    # The latest are kept, as many as the budget holds.
    newest = [chain.token for chain, _ in chains][-len(gateway._parsed) :]
    assert list(gateway._parsed) == newest
    assert kept_bytes(gateway) + len(chains[0][0].token) > BUDGET


def test_a_chain_in_use_survives_a_flood_of_distinct_tokens(
    gate: tuple[GatewayGate, SigningKey, SigningKey],
) -> None:
    gateway, root, agent = gate
    regular = issue(root, agent.did, ["model:m"], ttl=600)
    assert send(gateway, regular, agent) == 200
    kept = gateway._parsed[regular.token]
    stranger = SigningKey.generate()
    for i in range(200):
        # Verified large chains, over the budget in all, and forged ones, between its calls.
        chain, holder = large_chain(root if i % 2 else stranger, agent)
        assert send(gateway, chain, holder) == (200 if i % 2 else 401)
        if i % 10 == 9:
            assert send(gateway, regular, agent) == 200
    assert gateway._parsed.get(regular.token) is kept
    assert kept_bytes(gateway) <= BUDGET


def test_an_unused_chain_is_the_first_out(gate: tuple[GatewayGate, SigningKey, SigningKey]) -> None:
    gateway, root, agent = gate
    old = issue(root, agent.did, ["model:m"], ttl=600)
    assert send(gateway, old, agent) == 200
    for _ in range(BUDGET // (24 * 1024) + 1):
        chain, holder = large_chain(root, agent)
        assert send(gateway, chain, holder) == 200
    assert old.token not in gateway._parsed
