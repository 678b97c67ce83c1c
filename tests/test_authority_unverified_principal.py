"""A decision's principal (agentgate/authority/_decision.py): the invocation's signer, named only
once its signature verifies under the key its ``iss`` names. A denial of an invocation whose
signature does not verify (another key's, garbage) has no principal, whatever check refused it
first (an unreadable or untrusted chain, a holder mismatch, the signature itself): the claimed
signer proved nothing, and the audit log must not name it (docs/token-format.md, "Deciding").

Real components: a SQLite store."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_authority_decisions import ALICE, BOB, CALL, CAROL, NOW, ROOT, chain3

from agentgate.authority import Authority, ChainCache, GrantRepository, Invocation, decide, issue
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

MALLORY = SigningKey(bytes([21]) * 32)


@pytest.fixture
def local(sqlite_store: SQLiteStore) -> GrantRepository:
    return GrantRepository(sqlite_store)


def _forged(how: str) -> Invocation:
    """An invocation that claims a signer whose key never signed it."""
    chain = chain3()  # held by CAROL
    by_mallory = Invocation.sign(MALLORY, chain, CALL, now=NOW)
    if how == "another_key_claims_the_holder":
        return replace(by_mallory, issuer=CAROL.did)
    if how == "garbage_signature":
        return replace(Invocation.sign(CAROL, chain, CALL, now=NOW), signature=bytes(64))
    if how == "another_key_claims_a_third_party":  # wrong_holder: checked before the signature
        return replace(by_mallory, issuer=ALICE.did)
    if how == "unreadable_chain":
        return replace(by_mallory, issuer=CAROL.did, chain_token="ag1.not-a-chain")
    if how == "untrusted_chain":
        own = issue(MALLORY, CAROL.did, ["tool:payments.refund"], ttl=600, now=NOW)
        return replace(Invocation.sign(MALLORY, own, CALL, now=NOW), issuer=CAROL.did)
    raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "code"),
    [
        ("another_key_claims_the_holder", "bad_invocation_signature"),
        ("garbage_signature", "bad_invocation_signature"),
        ("another_key_claims_a_third_party", "wrong_holder"),
        ("unreadable_chain", "malformed_token"),
        ("untrusted_chain", "untrusted_root"),
    ],
)
def test_a_denial_whose_signature_does_not_verify_names_no_principal(
    local: GrantRepository, how: str, code: str
) -> None:
    """Review R56: a denial made before the invocation's signature was checked named its claimed signer as principal."""
    d = decide(_forged(how), repo=local, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.outcome is Outcome.DENY and d.findings[0].code == code, d.findings
    assert d.principal is None and d.to_dict()["principal"] is None


def test_a_denial_of_an_invocation_its_signer_did_sign_names_that_signer(local: GrantRepository) -> None:
    chain = chain3()
    for_51 = replace(CALL, args={"amount": 51, "currency": "EUR"})
    cases = [
        (
            Invocation.sign(BOB, chain, CALL, now=NOW),
            "wrong_holder",
            BOB,
        ),  # a copied chain: BOB made the call
        (
            replace(Invocation.sign(MALLORY, chain, CALL, now=NOW), chain_token="ag1.x"),
            "malformed_token",
            MALLORY,
        ),
        # signed for 51, sent with 50
        (replace(Invocation.sign(CAROL, chain, for_51, now=NOW), call=CALL), "args_digest_mismatch", CAROL),
        (Invocation.sign(CAROL, chain, CALL, now=NOW - 600), "invocation_expired", CAROL),
    ]
    for invocation, code, signer in cases:
        d = decide(invocation, repo=local, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
        assert d.outcome is Outcome.DENY and d.findings[0].code == code, (code, d.findings)
        assert d.principal == signer.did, code


def test_an_allowed_invocation_names_its_signer(local: GrantRepository) -> None:
    d = decide(Invocation.sign(CAROL, chain3(), CALL, now=NOW), repo=local, trusted=ROOT.public, now=NOW + 1)
    assert d.allowed and d.principal == CAROL.did


def test_a_held_decision_without_the_private_key_names_no_principal(local: GrantRepository) -> None:
    """Review R56: decide_held with only a public key named that key's DID as the principal, proven by nothing."""
    d = Authority(local, ROOT.public).decide_held(CAROL.public, chain3(), CALL, now=NOW + 1)  # type: ignore[arg-type]
    assert d.findings[0].code == "holder_key_missing" and d.principal is None
    assert (
        Authority(local, ROOT.public).decide_held(CAROL, chain3(), CALL, now=NOW + 1).principal == CAROL.did
    )
