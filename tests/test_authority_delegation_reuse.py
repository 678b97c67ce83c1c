"""``delegate`` from a ``Chain`` object the caller holds: its token is parsed once, at the first
operation that trusts its fields, and the result is the same, byte for byte, as from the token."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from agentgate.authority import Chain, _operations, delegate, issue, parse_chain, verify_chain
from agentgate.errors import Denied
from agentgate.keys import SigningKey

ROOT, BOSS, ALICE, CAROL = (SigningKey(bytes([n]) * 32) for n in (11, 12, 13, 14))
NOW = 1_900_000_000
NARROW = ["tool:payments.refund?amount<=50&currency=EUR"]


def _held_chain() -> Chain:
    root = issue(ROOT, BOSS.public, ["tool:payments.refund?amount<=500&currency=EUR"], ttl=3600, now=NOW)
    return delegate(
        root, BOSS, ALICE.public, ["tool:payments.refund?amount<=100&currency=EUR"], ttl=600, now=NOW
    )


def test_a_held_chain_is_parsed_once_and_delegates_byte_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R55: delegate parsed the parent's token again on every delegation from the same
    Chain object (20-65 us each). Rule: the first parse is kept on the object; later delegations
    parse nothing and sign the same bytes as a delegation from the token itself."""
    chain = _held_chain()
    monkeypatch.setattr(os, "urandom", lambda n: b"\x07" * n)  # the grant nonce: same bytes every time
    parsed: list[str] = []

    def counted(token: str) -> Chain:
        parsed.append(token)
        return parse_chain(token)

    monkeypatch.setattr(_operations, "parse_chain", counted)
    first = delegate(chain, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1)
    assert len(parsed) == 1
    again = [delegate(chain, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1) for _ in range(3)]
    assert len(parsed) == 1  # held: compared with its parse, not parsed again
    from_token = delegate(chain.token, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1)
    assert len(parsed) == 2
    assert {d.token for d in again} == {first.token} == {from_token.token}
    assert all(d == from_token for d in again)
    assert verify_chain(first, ROOT.public.did, now=NOW + 2) == from_token


def test_a_held_chain_edited_after_its_parse_is_still_refused() -> None:
    """The kept parse never vouches for other fields: a copy with an edited tip
    (``dataclasses.replace``) carries no parse, and a field changed in place on the held object
    differs from its parse; both are refused as ``tip_mismatch`` (R53's rule)."""
    chain = _held_chain()
    delegate(chain, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1)  # parses and keeps it
    widened = Chain((*chain.links[:-1], replace(chain.tip, max_depth=5)), chain.token)
    with pytest.raises(Denied, match="tip_mismatch"):
        delegate(widened, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1)
    copy = replace(chain)
    assert copy._parsed is None
    object.__setattr__(chain, "links", widened.links)  # bypassing frozen: still not the token's
    with pytest.raises(Denied, match="tip_mismatch"):
        delegate(chain, ALICE, CAROL.public, NARROW, ttl=60, now=NOW + 1)
    object.__setattr__(chain, "token", widened.token + "")  # an equal token string: parse kept
    with pytest.raises(Denied, match="tip_mismatch"):
        verify_chain(chain, ROOT.public.did, now=NOW + 2)
