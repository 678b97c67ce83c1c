"""The format's size limits at the bound exactly and one past it (docs/token-format.md: a token
of at most ``MAX_TOKEN_BYTES``, 1 to ``MAX_LINKS`` links, payloads of at most
``MAX_PAYLOAD_BYTES``): what is signed at the bound verifies, and what would pass it is refused
when signing, never handed out as a token no verifier reads."""

from __future__ import annotations

import pytest

from agentgate.authority import Chain, delegate, issue, parse_chain, verify_chain
from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.authority._grant import GRANT_CONTEXT, MAX_LINKS, MAX_PAYLOAD_BYTES, MAX_TOKEN_BYTES
from agentgate.errors import ScopeCreep, TokenFormatError
from agentgate.keys import SigningKey

NOW = 1_800_000_000
KEYS = [SigningKey(bytes([n]) * 32) for n in range(21, 21 + MAX_LINKS + 2)]
VALUES = [f"v{i:04d}" for i in range(60)]
WIDE = f"a={'|'.join(VALUES)}&b={'|'.join(VALUES)}"
"""Two constraints of 60 values each: about a kilobyte of payload per capability."""


def _four_heavy_links() -> Chain:
    """A chain of four links of five wide capabilities each: 29,884 bytes of token."""
    caps = [f"tool:t{j}?{WIDE}" for j in range(5)]
    chain = issue(KEYS[0], KEYS[1].did, caps, ttl=3600, max_depth=MAX_LINKS - 1, now=NOW)
    for i in range(1, 4):
        chain = delegate(chain, KEYS[i], KEYS[i + 1].did, caps, ttl=3600, now=NOW)
    return chain


def _fifth_link(parent: Chain, purpose_length: int) -> Chain:
    # 47 values of t1's ``a`` and a 252-character purpose make the token exactly 32 KiB.
    caps = [f"tool:t0?{WIDE}", f"tool:t1?a={'|'.join(VALUES[:47])}&b=v0000"]
    return delegate(parent, KEYS[4], KEYS[5].did, caps, ttl=60, purpose="x" * purpose_length, now=NOW)


def test_a_delegation_that_would_pass_the_token_size_limit_is_refused_when_signing() -> None:
    """Review R56: delegate signed and returned a chain of 37,375 bytes, over the 32 KiB every
    verifier refuses (its holder found out only at the first call, as malformed_token). Rule: a
    chain at the limit exactly is delegated and verifies; one that would pass it is refused by
    delegate with a TokenFormatError naming the size and the limit."""
    parent = _four_heavy_links()
    at_limit = _fifth_link(parent, 252)
    assert len(at_limit.token) == MAX_TOKEN_BYTES
    assert verify_chain(at_limit, KEYS[0].public, now=NOW).holder == KEYS[5].did
    with pytest.raises(TokenFormatError, match=f"would be 32770 bytes; the limit is {MAX_TOKEN_BYTES}"):
        _fifth_link(parent, 253)
    with pytest.raises(TokenFormatError, match="limit"):
        parse_chain(at_limit.token + "A")


def test_a_payload_at_the_limit_is_signed_and_one_byte_more_is_refused() -> None:
    caps = [f"tool:t{j}?{WIDE}" for j in range(7)] + [f"tool:t7?a={'|'.join(VALUES[:37])}"]
    chain = issue(KEYS[0], KEYS[1].did, caps, ttl=60, purpose="x" * 251, now=NOW)
    assert len(chain.root.payload) == MAX_PAYLOAD_BYTES
    assert verify_chain(chain.token, KEYS[0].public, now=NOW).id == chain.id
    with pytest.raises(TokenFormatError, match=f"8193 bytes; the limit is {MAX_PAYLOAD_BYTES}"):
        issue(KEYS[0], KEYS[1].did, caps, ttl=60, purpose="x" * 252, now=NOW)


def test_a_chain_of_the_most_links_verifies_and_one_more_link_is_refused() -> None:
    chain = issue(KEYS[0], KEYS[1].did, ["tool:search"], ttl=3600, max_depth=MAX_LINKS - 1, now=NOW)
    for i in range(1, MAX_LINKS):
        chain = delegate(chain, KEYS[i], KEYS[i + 1].did, ["tool:search"], ttl=3600, now=NOW)
    assert len(verify_chain(chain.token, KEYS[0].public, now=NOW).links) == MAX_LINKS
    with pytest.raises(ScopeCreep, match="no further delegation"):
        delegate(chain, KEYS[MAX_LINKS], KEYS[MAX_LINKS + 1].did, ["tool:search"], ttl=60, now=NOW)
    # A 17th link signed by hand (depth 0 below depth 0) is refused as format, before any check.
    body = {
        "v": 1,
        "iss": KEYS[MAX_LINKS].did,
        "aud": KEYS[MAX_LINKS + 1].did,
        "caps": [{"resource": "tool:search", "action": "invoke", "constraints": {}}],
        "budget": None,
        "nbf": NOW,
        "exp": NOW + 60,
        "depth": 0,
        "nonce": "0" * 32,
        "purpose": "",
        "parent": chain.id,
    }
    payload = canonical_json(body)
    signature = KEYS[MAX_LINKS].sign(GRANT_CONTEXT + payload)
    longer = f"{chain.token}.{b64url_encode(payload)}.{b64url_encode(signature)}"
    with pytest.raises(TokenFormatError, match=f"longer than {MAX_LINKS} links"):
        verify_chain(longer, KEYS[0].public, now=NOW)
