"""Review R29: authority over time. Revocation racing decisions (threads and processes, SQLite and
PostgreSQL), clocks and tolerances, approvals used twice at once, and key files. Each test below
the first section is a defect found by running the real thing; the first section records what
was attacked and held."""

from __future__ import annotations

import pytest

from agentgate.authority import (
    Authority,
    ChainCache,
    GrantRepository,
    Invocation,
    decide,
    delegate,
    issue,
    verify_chain,
)
from agentgate.capabilities import Call
from agentgate.errors import Expired
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import Store

NOW = 1_800_000_000
ROOT, ALICE, BOB = (SigningKey(bytes([i]) * 32) for i in range(41, 44))
PAY = Call.tool("payments.refund", {"amount": 5})


# --- defects -----------------------------------------------------------------------------------------


def test_a_verifier_with_another_clock_tolerance_refuses_a_replay(store: Store) -> None:
    """The nonce was stored under (signed expiry + this verifier's skew): two verifiers on one store
    with different tolerances (``Authority(skew=60)`` beside the default 30 s) wrote different
    keys for the same invocation, so each accepted it once: a replay."""
    repo = GrantRepository(store)
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE, chain, PAY, now=NOW)
    strict, lenient = Authority(repo, ROOT.public), Authority(repo, ROOT.public, skew=120)
    assert strict.decide(inv, now=NOW + 1).outcome is Outcome.ALLOW
    replayed = lenient.decide(inv, now=NOW + 2)
    assert replayed.outcome is Outcome.DENY and replayed.findings[0].code == "replayed_invocation"
    again = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 3, skew=0, cache=ChainCache())
    assert again.findings[0].code == "replayed_invocation"
    repo.close()


def test_a_grant_from_an_issuer_whose_clock_runs_ahead_is_delegable_as_soon_as_it_is_usable(
    store: Store,
) -> None:
    """Decisions tolerate 30 s on not-before, ``delegate`` tolerated none: with the issuer's clock
    2 s ahead of the holder's, the fresh grant was usable at once but ``grant delegate`` (and the
    Gate's delegation) refused it, ``grant_not_yet_valid``, until the holder's clock caught up."""
    parent = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=600, now=NOW)
    here = NOW - 2  # the holder's clock
    verify_chain(parent, ROOT.public, now=here)
    child = delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=60, now=here)
    assert child.tip.not_before == NOW  # never before its parent
    repo = GrantRepository(store)
    inv = Invocation.sign(BOB, child, PAY, now=here)
    decided = decide(inv, repo=repo, trusted=ROOT.public, now=here, cache=ChainCache())
    assert decided.outcome is Outcome.ALLOW
    with pytest.raises(Expired, match="grant_not_yet_valid"):  # beyond the tolerance: still refused
        delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=60, now=NOW - 31)
    repo.close()
