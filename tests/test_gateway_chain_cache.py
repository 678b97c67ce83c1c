"""The gateway's cache of parsed chains: bounded in the memory its chains hold (their
``chain_weight``), least recently used out first, and never filled by callers who do not
authenticate.

A parsed chain takes up to about 20 times its token's bytes, and a token may be 32 KiB: 1024
entries of forged tokens held about 500 MiB before the cache kept only verified chains, within
2 MiB of token text; that bound still let verified chains of large ``in`` sets hold 15 times it,
until review R56 weighed each chain as the authority's own cache does.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import (
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    Invocation,
    chain_weight,
    delegate,
    issue,
    parse_chain,
)
from agentgate.authority._chain_findings import chain_finding
from agentgate.authority._signatures import _anchors
from agentgate.capabilities import Call, Capability, covers
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
    delegation:  # the deep chains below are within it (each link is held to it: review R57)
      max_depth: 15
      capabilities: [{{resource: model:m}}, {{resource: "tool:*", action: "*"}}]
"""
CHAT_BUDGET = Budget(1_000_000, "usd_micros")
"""The chat role's budget, which a root grant may carry at most (review R58)."""
CALL = Call.model("m", {"max_tokens": 1})
BUDGET = 1024 * 1024
"""The ``chain_weight`` the gateway keeps parsed chains within in these tests: its own budget is
``GatewayGate._parsed_max_bytes``, 32 MiB (docs/gateway.md), which would take hundreds of chains
to fill."""
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
    chain, holder = issue(issuer, first.did, caps, ttl=3600, max_depth=15, budget=CHAT_BUDGET, now=now), first
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
    gateway._parsed_max_bytes = BUDGET
    try:
        yield gateway, root, agent
    finally:
        gateway.close()


def send(gate: GatewayGate, chain: Chain, key: SigningKey) -> int:
    """The status of one call of model ``m`` with ``chain``, signed by ``key``."""
    invocation = Invocation.sign(key, chain, CALL).encode()
    return gate.authorize_invocation(chain.token, invocation, CALL, (1, 1)).status


def kept_bytes(gate: GatewayGate) -> int:
    """The weight the gateway counts for the chains it keeps, each weighed again."""
    return sum(chain_weight(token, chain) for token, (chain, _) in gate._parsed.items())


def weight(chain: Chain) -> int:
    return chain_weight(chain.token, chain)


def set_chain(issuer: SigningKey, first: SigningKey) -> tuple[Chain, SigningKey]:
    """A chain of four links from ``issuer`` to ``first`` and on to fresh keys, each delegation
    holding ``model:m`` and a capability with a 1,000-value ``in`` set of 1-character strings (the
    most memory per token byte, test_authority_chain_cache.py); and the key of its holder."""
    values = [chr(0x4E00 + v) for v in range(1000)]
    cap = Capability.from_dict(
        {"resource": "tool:t", "action": "invoke", "constraints": {"a": {"in": values}}}
    )
    now = time.time()
    chain, holder = (
        issue(issuer, first.did, ["model:m", "tool:*#*"], ttl=3600, max_depth=4, budget=CHAT_BUDGET, now=now),
        first,
    )
    for i in range(3):
        key = SigningKey.generate()
        chain, holder = delegate(chain, holder, key.did, ["model:m", cap], ttl=3000 - i, now=now), key
    return chain, holder


def held_bytes(tokens: list[str], anchors: frozenset[str]) -> int:
    """The memory ``tokens`` hold parsed, verified and decided on, measured with tracemalloc as
    test_authority_chain_cache.py does (a decision builds the set that membership is looked up in)."""
    gc.collect()
    tracemalloc.start()
    try:
        chains = [parse_chain(token) for token in tokens]
        for chain in chains:
            assert chain_finding(chain, anchors) is None
            for link in chain.links:
                for cap in link.capabilities:
                    covers(cap, Call.tool("t", {"a": "\u4e00"}))
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


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
    chain = issue(root, agent.did, ["model:m"], ttl=600, budget=CHAT_BUDGET)
    assert send(gateway, chain, agent) == 200
    kept = gateway._parsed[chain.token]
    assert send(gateway, chain, agent) == 200
    assert gateway._parsed[chain.token] is kept and len(gateway._parsed) == 1
    assert kept[1] == weight(kept[0]) == gateway._parsed_bytes


def test_kept_chains_stay_within_the_byte_budget(gate: tuple[GatewayGate, SigningKey, SigningKey]) -> None:
    gateway, root, agent = gate
    chains = [large_chain(root, agent) for _ in range(16)]
    assert sum(weight(chain) for chain, _ in chains) > BUDGET
    for chain, holder in chains:
        assert send(gateway, chain, holder) == 200
        assert kept_bytes(gateway) == gateway._parsed_bytes <= BUDGET
    # The latest are kept, as many as the budget holds.
    newest = [chain.token for chain, _ in chains][-len(gateway._parsed) :]
    assert list(gateway._parsed) == newest
    assert kept_bytes(gateway) + weight(chains[0][0]) > BUDGET


def test_kept_chains_of_large_sets_hold_no_more_memory_than_the_budget(
    gate: tuple[GatewayGate, SigningKey, SigningKey],
) -> None:
    """Review R56: the gateway bounded its kept chains by their tokens' text (2 MiB), and a
    verified chain of 1,000-value in sets holds about 15 times its 27 KB token: the 16 chains
    below (430 KB of tokens) were all kept under a 1 MiB bound and held about 6 MB. Rule: kept
    chains are weighed with chain_weight, and what they hold stays within the budget."""
    gateway, root, agent = gate
    chains = [set_chain(root, agent) for _ in range(16)]
    assert sum(len(chain.token) for chain, _ in chains) < BUDGET  # the token text fits in it
    for chain, holder in chains:
        assert send(gateway, chain, holder) == 200
    kept = list(gateway._parsed)
    held = held_bytes(kept, _anchors(root.public))
    assert kept and held <= BUDGET
    assert kept_bytes(gateway) <= BUDGET


def test_a_chain_in_use_survives_a_flood_of_distinct_tokens(
    gate: tuple[GatewayGate, SigningKey, SigningKey],
) -> None:
    gateway, root, agent = gate
    regular = issue(root, agent.did, ["model:m"], ttl=600, budget=CHAT_BUDGET)
    assert send(gateway, regular, agent) == 200
    kept = gateway._parsed[regular.token]
    stranger = SigningKey.generate()
    for i in range(40):
        # Verified large chains, over the budget in all, and forged ones, between its calls.
        chain, holder = large_chain(root if i % 2 else stranger, agent)
        assert send(gateway, chain, holder) == (200 if i % 2 else 401)
        if i % 10 == 9:
            assert send(gateway, regular, agent) == 200
    assert gateway._parsed.get(regular.token) is kept
    assert kept_bytes(gateway) <= BUDGET


def test_an_unused_chain_is_the_first_out(gate: tuple[GatewayGate, SigningKey, SigningKey]) -> None:
    gateway, root, agent = gate
    old = issue(root, agent.did, ["model:m"], ttl=600, budget=CHAT_BUDGET)
    assert send(gateway, old, agent) == 200
    chain, holder = large_chain(root, agent)
    for _ in range(BUDGET // weight(chain) + 1):
        assert send(gateway, chain, holder) == 200
        chain, holder = large_chain(root, agent)
    assert old.token not in gateway._parsed
