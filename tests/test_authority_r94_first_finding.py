"""Review R94: a decision, ``verify_chain`` and ``delegate`` report only a refused link's first
finding, but built all of them: the witness search of every capability of the link (up to 16),
on every presentation of a refused chain, which is not cached (about 20 times the work). They
now stop at the first finding, which is the one the full list (``agentgate grant inspect``,
``audit explain``) names first. Work is counted in ``_capability_finding`` calls, not timed."""

from __future__ import annotations

from typing import Any

import pytest
from _call_counts import calls_of

from agentgate.authority import (
    Budget,
    ChainCache,
    GrantRepository,
    Invocation,
    _chain_findings,
    decide,
    delegate,
    issue,
    verify_chain,
)
from agentgate.authority._chain_findings import link_findings
from agentgate.authority._grant import Chain, _encode_chain
from agentgate.authority._operations import _sign
from agentgate.capabilities import Call, Capability
from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, ALICE, BOB = (SigningKey(bytes([i]) * 32) for i in range(41, 44))
NOW = 1_800_000_000
PARENT = [f"tool:t{i}?a<=100&b<=100" for i in range(16)]
WIDENED = [f"tool:t{i}?a<=1000&b<=1000" for i in range(16)]


def _parent() -> Chain:
    return issue(ROOT, ALICE.public, PARENT, ttl=3600, budget=Budget(100), now=NOW, max_depth=3)


def _hand_signed(child: list[str], **fields: Any) -> Chain:
    """The parent chain with a link signed by its holder without ``delegate``'s checks."""
    chain = _parent()
    link = _sign(
        ALICE,
        **{
            "audience": BOB.public.did,
            "capabilities": [Capability.parse(c) for c in child],
            "budget": Budget(100),
            "not_before": NOW,
            "expires": NOW + 60,
            "max_depth": 0,
            "purpose": "",
            "parent": chain.tip.id,
            "chain_bytes": len(chain.token),
            **fields,
        },
    )
    links = (*chain.links, link)
    return Chain(links, _encode_chain(links))


REFUSED = {
    "every capability widened": _hand_signed(WIDENED),
    "the first capability within, the rest widened": _hand_signed([PARENT[0], *WIDENED[1:]]),
    "a capability of another tool, then widened ones": _hand_signed(["tool:other", *WIDENED[:3]]),
    "depth widened before capabilities": _hand_signed(WIDENED, max_depth=3),
    "a cycle before everything": _hand_signed(WIDENED, audience=ROOT.public.did, max_depth=5),
    "budget widened and outliving the parent": _hand_signed(
        PARENT[:2], budget=Budget(500), expires=NOW + 7200
    ),
    "no budget, starting early": _hand_signed(PARENT[:1], budget=None, not_before=NOW - 10),
}


def _first_of_all(chain: Chain) -> Finding:
    found = link_findings(chain.links[:-1], chain.links[-1])
    assert len(found) >= 2  # each case has several findings: the first must be told apart
    return found[0]


def _decided(chain: Chain, store: SQLiteStore) -> Finding:
    inv = Invocation.sign(BOB, chain, Call.tool("t0", {"a": 1, "b": 1}), now=NOW)
    d = decide(inv, repo=GrantRepository(store), trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.findings
    return d.findings[0]


def _verified(chain: Chain) -> Finding:
    with pytest.raises(AuthorityError) as raised:
        verify_chain(chain.token, ROOT.public, now=NOW + 1)
    assert isinstance(raised.value.finding, Finding)
    return raised.value.finding


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_decision_and_verify_chain_report_the_first_finding_of_the_full_list(
    case: str, sqlite_store: SQLiteStore
) -> None:
    chain = REFUSED[case]
    first = _first_of_all(chain)
    assert _decided(chain, sqlite_store) == first
    assert _verified(chain) == first


def test_a_refused_decision_searches_one_capability_not_every_one(
    monkeypatch: pytest.MonkeyPatch, sqlite_store: SQLiteStore
) -> None:
    chain = REFUSED["every capability widened"]
    searched = calls_of(monkeypatch, _chain_findings, "_capability_finding")
    assert _decided(chain, sqlite_store).code == "constraint_widened"
    assert searched == [1]
    assert _verified(chain).code == "constraint_widened"
    assert searched == [2]


def test_inspection_still_lists_a_finding_for_every_widened_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain = REFUSED["every capability widened"]
    searched = calls_of(monkeypatch, _chain_findings, "_capability_finding")
    found = link_findings(chain.links[:-1], chain.links[-1])
    assert [f.code for f in found] == ["constraint_widened"] * 16 and searched == [16]


def test_delegate_refuses_with_the_first_finding_after_searching_one_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searched = calls_of(monkeypatch, _chain_findings, "_capability_finding")
    with pytest.raises(AuthorityError) as raised:
        delegate(_parent(), ALICE, BOB.public, WIDENED, ttl=60, now=NOW, max_depth=0)
    refused = raised.value.finding
    assert isinstance(refused, Finding) and searched == [1]
    first = _first_of_all(REFUSED["every capability widened"])
    assert (refused.code, refused.message, refused.field) == (first.code, first.message, first.field)
