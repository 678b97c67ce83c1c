"""Review R47 (mutation testing of the authority core: capabilities, grants, invocations,
decisions, encoding, keys): each test kills a hand-made mutant that no earlier test killed. The
mutant is named in each test's docstring, with the rule it pins (docs/token-format.md).

Most tokens here are built by hand and signed by the trust anchor, so that nothing but the
format rule under test can refuse them: a refusal by any other check would hide the mutant.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import base58
import pytest

from agentgate.authority import (
    Authority,
    ChainCache,
    GrantRepository,
    Invocation,
    Outcome,
    decide,
    delegate,
    issue,
    parse_chain,
    revoke,
    verify_chain,
)
from agentgate.authority._encoding import b64url_encode, canonical_json, did_public_key, sha256_hex
from agentgate.authority._grant import GRANT_CONTEXT, _grant_from_canonical
from agentgate.authority._invocation import INVOCATION_CONTEXT
from agentgate.capabilities import Call, parse_capability
from agentgate.errors import CapabilityError, KeyFileError, ScopeCreep, TokenFormatError
from agentgate.keys import SigningKey, load_signing_key, public_key_from_did, save_key
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB = (SigningKey(bytes([i]) * 32) for i in range(71, 74))
_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
CAP = {"resource": "tool:pay", "action": "invoke", "constraints": {"amount": {"le": 500}}}


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "iss": ROOT.did,
        "aud": ALICE.did,
        "caps": [CAP],
        "budget": None,
        "nbf": NOW,
        "exp": NOW + 600,
        "depth": 1,
        "nonce": "0" * 32,
        "purpose": "",
        "parent": None,
    }
    body.update(changes)
    return body


def _token(*links: tuple[SigningKey, bytes]) -> str:
    parts = ["ag1"]
    for key, payload in links:
        parts += [b64url_encode(payload), b64url_encode(key.sign(GRANT_CONTEXT + payload))]
    return ".".join(parts)


def _root(**changes: Any) -> str:
    """A one-link token signed by the trust anchor, its payload canonical JSON of ``_body``."""
    return _token((ROOT, canonical_json(_body(**changes))))


def _refused(token: str) -> None:
    with pytest.raises(TokenFormatError):
        parse_chain(token)
    with pytest.raises(TokenFormatError):
        verify_chain(token, ROOT.public, now=NOW + 1)


def test_the_hand_built_root_is_accepted_as_it_is() -> None:
    """Control for the refusals below: the unedited hand-built root verifies (fast path too)."""
    chain = verify_chain(_root(), ROOT.public, now=NOW + 1)
    assert _grant_from_canonical(chain.root.payload, chain.root.signature) is not None


def test_a_grant_whose_expiry_equals_its_not_before_is_refused() -> None:
    """Mutants: nbf < exp relaxed to nbf <= exp (reference path, or fast path). Rule: a grant
    lives at least one second (0 <= nbf < exp < 2**40)."""
    _refused(_root(exp=NOW))


def test_a_grant_allowing_more_than_fifteen_further_levels_is_refused() -> None:
    """Mutants: depth bound MAX_DEPTH + 1 (reference path, or fast path). Rule: depth is 0..15."""
    _refused(_root(depth=16))
    assert verify_chain(_root(depth=15), ROOT.public, now=NOW + 1).root.max_depth == 15


def test_a_grant_naming_seventeen_capabilities_is_refused() -> None:
    """Mutant: fast path counts caps up to MAX_CAPABILITIES + 1. Rule: 1 to 16 capabilities."""
    caps = [{"resource": f"tool:t{i}", "action": "invoke", "constraints": {}} for i in range(17)]
    _refused(_root(caps=caps))
    assert len(verify_chain(_root(caps=caps[:16]), ROOT.public, now=NOW + 1).root.capabilities) == 16


def test_a_negative_budget_is_refused() -> None:
    """Mutant: the fast path drops the 0 <= amount <= 2**63-1 check. Rule: budgets are non-negative."""
    _refused(_root(budget={"amount": -1, "unit": "calls"}))
    _refused(_root(budget={"amount": 2**63, "unit": "calls"}))


def test_a_budget_with_a_field_beside_amount_and_unit_is_refused() -> None:
    """Mutant: the reference path accepts a budget holding amount, unit and more. Rule: a budget
    has exactly the fields amount and unit."""
    _refused(_root(budget={"amount": 5, "unit": "calls", "spent": 0}))


@pytest.mark.parametrize("extra", [{"crit": ["limit"]}, {"crit": []}, {"alg": "none"}])
def test_a_critical_extension_or_an_unknown_field_is_refused(extra: dict[str, Any]) -> None:
    """Mutants: the fast path accepts a superset of the required fields; the reference path skips
    the ``crit`` check. Rule: ``crit`` names extensions this verifier does not know: refuse."""
    _refused(_root(**extra))


def test_a_signed_payload_that_is_not_canonical_json_is_refused() -> None:
    """Mutants: the fast grant path, or the reference ``parse_canonical``, skips the byte-for-byte
    comparison with the canonical re-encoding. Rule: a signed payload is canonical JSON or refused
    (whitespace, key order)."""
    canonical = canonical_json(_body())
    spaced = canonical.replace(b',"exp"', b', "exp"')
    reordered = b'{"v":1,' + canonical.replace(b',"v":1}', b"}")[1:]
    for payload in (spaced, reordered):
        assert payload != canonical
        _refused(_token((ROOT, payload)))


def test_a_nonce_in_upper_case_hex_is_refused() -> None:
    """Mutant: the fast path drops the nonce check. Rule: the nonce is 32 lower-case hex digits."""
    _refused(_root(nonce="A" * 32))
    _refused(_root(nonce="0" * 31))


def test_a_parent_that_is_not_lower_case_hex_is_refused_as_malformed() -> None:
    """Mutants: the parent's 64-hex check dropped (fast or reference path): the token would then be
    read and refused only as ``root_has_parent``. Rule: parent is 64 lower-case hex digits or null."""
    _refused(_root(parent="A" * 64))


def test_version_true_is_not_version_one() -> None:
    """Mutant: the reference path compares ``v`` with 1 by value (``True == 1``). Rule: a boolean
    is never an integer."""
    _refused(_root(v=True))


def test_a_capability_not_in_canonical_form_is_refused() -> None:
    """Mutant: the reference path skips ``to_dict() == raw`` for capabilities. Rule: a one-value
    set is spelled ``eq``; the signed bytes have one spelling of each meaning."""
    cap = {"resource": "tool:pay", "action": "invoke", "constraints": {"amount": {"in": [5]}}}
    _refused(_root(caps=[cap]))


def test_an_audience_that_is_not_a_did_key_is_refused() -> None:
    """Mutant: the reference path checks the issuer's did:key form and not the audience's.
    Rule: iss and aud are both Ed25519 did:key identifiers. A boolean constraint value sends
    the payload down the reference path."""
    cap = {"resource": "tool:pay", "action": "invoke", "constraints": {"ok": {"eq": True}}}
    assert verify_chain(_root(caps=[cap]), ROOT.public, now=NOW + 1).root.audience == ALICE.did
    _refused(_root(caps=[cap], aud="did:key:zNotAKey"))
    _refused(_root(aud="did:key:zNotAKey"))


def test_a_token_ending_in_an_unsigned_payload_is_refused() -> None:
    """Mutant: parse_chain drops the even-parts check (then fails with an IndexError, or reads a
    link without its signature). Rule: ag1 followed by payload.signature pairs."""
    token = _root()
    _refused(token + "." + token.split(".")[1])


# --- decisions --------------------------------------------------------------------------------------

CALL = Call.tool("pay", {"amount": 50})


@pytest.fixture
def repo(sqlite_store: SQLiteStore) -> GrantRepository:
    return GrantRepository(sqlite_store)


def _decide(
    repo: GrantRepository, chain: Any, signer: SigningKey, at: int, signed_at: int, **kw: Any
) -> tuple[Outcome, str | None]:
    inv = Invocation.sign(signer, chain, CALL, now=signed_at)
    d = decide(inv, repo=repo, trusted=ROOT.public, now=at, cache=ChainCache(), **kw)
    return d.outcome, (d.findings[0].code if d.findings else None)


def _two_links(tip_start: int = NOW, tip_ttl: int = 60) -> Any:
    root = issue(ROOT, ALICE.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    return delegate(root, ALICE, BOB.did, ["tool:pay?amount<=100"], ttl=tip_ttl, now=tip_start)


def test_a_chain_is_dead_once_its_shortest_lived_link_expires(repo: GrantRepository) -> None:
    """Mutants: ``Chain.expires`` the latest link expiry (``max``), or the quick time check in
    ``_conclude`` letting ``t == expires`` through. Rule: a chain is dead from the earliest expiry
    of any link, exactly at that second (no tolerance on expiry)."""
    chain = _two_links(tip_ttl=60)
    assert chain.expires == NOW + 60
    assert _decide(repo, chain, BOB, NOW + 59, NOW + 59) == (Outcome.ALLOW, None)
    assert _decide(repo, chain, BOB, NOW + 60, NOW + 60) == (Outcome.DENY, "grant_expired")
    assert _decide(repo, chain, BOB, NOW + 600, NOW + 600) == (Outcome.DENY, "grant_expired")


def test_a_chain_starts_when_its_latest_starting_link_starts_less_the_skew(repo: GrantRepository) -> None:
    """Mutants: ``Chain.not_before`` the earliest link start (``min``), or the not-before
    tolerance widened by one second. Rule: valid from the latest not-before minus the skew (30 s)."""
    chain = _two_links(tip_start=NOW + 1000, tip_ttl=600)
    assert chain.not_before == NOW + 1000
    assert _decide(repo, chain, BOB, NOW + 969, NOW + 969) == (Outcome.DENY, "grant_not_yet_valid")
    assert _decide(repo, chain, BOB, NOW + 970, NOW + 970) == (Outcome.ALLOW, None)


def test_an_invocation_is_dead_at_its_expiry_second(repo: GrantRepository) -> None:
    """Mutant: ``t > inv.expires`` for ``t >= inv.expires``. Rule: an invocation signed with ttl 60
    at T is refused from T + 60 on."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB, chain, CALL, now=NOW, ttl=60)
    at_expiry = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 60, cache=ChainCache())
    assert at_expiry.findings[0].code == "invocation_expired"
    assert decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 59, cache=ChainCache()).allowed


def test_an_invocation_dated_more_than_the_skew_ahead_is_refused(repo: GrantRepository) -> None:
    """Mutant: the issued-at tolerance widened by a second. Rule: iat <= now + skew."""
    chain = _two_links(tip_ttl=600)
    assert _decide(repo, chain, BOB, NOW + 100, NOW + 131) == (Outcome.DENY, "invocation_not_yet_valid")
    assert _decide(repo, chain, BOB, NOW + 100, NOW + 130) == (Outcome.ALLOW, None)


def test_a_nonce_is_spent_for_verifiers_of_any_skew_sharing_the_store(repo: GrantRepository) -> None:
    """Mutant: the nonce keyed by the signed expiry plus this verifier's skew instead of the fixed
    30 s. Rule: one invocation is allowed once across every verifier sharing a nonce table."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB, chain, CALL, now=NOW)
    first = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, skew=30, cache=ChainCache())
    again = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, skew=120, cache=ChainCache())
    assert first.allowed
    assert again.findings[0].code == "replayed_invocation"


def test_revoking_the_root_kills_the_tip_signed_and_held(repo: GrantRepository) -> None:
    """Mutants: revocation read for the tip's id only (signed path, or held path). Rule: every grant
    below a revoked grant is dead."""
    chain = _two_links(tip_ttl=600)
    revoke(repo, chain.root.id, now=NOW)
    assert _decide(repo, chain, BOB, NOW + 1, NOW + 1) == (Outcome.DENY, "revoked")
    held = Authority(repo, ROOT.public).decide_held(BOB, chain, CALL, now=NOW + 1)
    assert held.findings[0].code == "revoked" and held.findings[0].grant == chain.root.id


def test_the_tip_capabilities_decide_not_the_roots(repo: GrantRepository) -> None:
    """Mutant: coverage checked against the root's capabilities. Rule: the holder has only what
    its own grant (the tip) names."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB, chain, Call.tool("pay", {"amount": 300}), now=NOW)
    d = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.findings[0].code == "call_not_covered"


# --- encoding and did:key ---------------------------------------------------------------------------


def test_a_signature_part_with_stray_trailing_bits_is_refused() -> None:
    """Mutant: the one-pass part decoder (``b64url_decode_parts``) drops the trailing-bits check
    (binascii's strict mode does not check them). Rule: each byte string has one base64url
    spelling, so a token cannot be re-spelled (another cache key, another audit string)."""
    token = _root()
    value = _B64URL.index(token[-1])
    assert value & 0x0F == 0  # 64 bytes: 86 characters, the last one carries 4 unused bits
    _refused(token[:-1] + _B64URL[value | 0x01])


def test_a_did_key_with_a_leading_zero_digit_is_refused() -> None:
    """Mutant: ``did_public_key`` drops the leading-``1`` check (a zero byte before the multicodec,
    same value). Rule: one canonical spelling of each did:key; a trust anchor spelled otherwise is
    refused, never taken as the same key."""
    respelled = ALICE.did[:9] + "1" + ALICE.did[9:]
    with pytest.raises(TokenFormatError):
        did_public_key(respelled)
    with pytest.raises(TokenFormatError):
        verify_chain(_root(), respelled, now=NOW + 1)


@pytest.mark.parametrize("codec", [b"\xed\x02", b"\xed\xff", b"\xec\x01", b"\x12\x00"])
def test_a_did_key_with_another_multicodec_is_refused(codec: bytes) -> None:
    """Mutant: the multicodec range widened (``0xed02`` to ``0xee01``). Rule: the did:key holds
    the multicodec ``0xed 0x01`` (Ed25519) and 32 key bytes, nothing else."""
    did = "did:key:z" + base58.b58encode(codec + ALICE.public.raw).decode()
    with pytest.raises(TokenFormatError):
        did_public_key(did)
    with pytest.raises(KeyFileError):
        public_key_from_did(did)
    assert did_public_key("did:key:z" + base58.b58encode(b"\xed\x01" + ALICE.public.raw).decode()) == (
        ALICE.public.raw
    )


def test_a_private_key_file_readable_by_its_group_is_refused(tmp_path: Path) -> None:
    """Mutant: the key-file mode check looks at the others' bits only. Rule: a private key file
    that group or others may read or write (0640, 0660, 0604) is refused."""
    key_path, _ = save_key(ALICE, tmp_path, "alice")
    assert load_signing_key(key_path).did == ALICE.did
    for mode in (0o640, 0o620, 0o610):
        os.chmod(key_path, mode)
        with pytest.raises(KeyFileError, match="accessible by others"):
            load_signing_key(key_path)


# --- the capability grammar -------------------------------------------------------------------------


def test_an_operator_given_twice_on_one_field_is_refused() -> None:
    """Mutant: the parser drops the "given twice" check, so the later bound silently replaces the
    earlier one (``amount<=500&amount<=900`` would allow 900). Rule: refuse, never guess."""
    for text in ("tool:pay?amount<=500&amount<=900", "tool:pay?cur=EUR&cur=USD", "tool:pay?p^=a&p^=ab"):
        with pytest.raises(CapabilityError, match="given twice"):
            parse_capability(text)


# --- attenuation of budgets, by hand-signed links ---------------------------------------------------


def _budgeted_chain(child_budget: dict[str, Any] | None) -> str:
    root = canonical_json(_body(budget={"amount": 1000, "unit": "calls"}))
    child = _body(iss=ALICE.did, aud=BOB.did, depth=0, parent=sha256_hex(root), budget=child_budget)
    return _token((ROOT, root), (ALICE, canonical_json(child)))


@pytest.mark.parametrize(
    ("budget", "code"),
    [
        (None, "budget_widened"),
        ({"amount": 1001, "unit": "calls"}, "budget_widened"),
        ({"amount": 10, "unit": "tokens"}, "budget_unit_changed"),
    ],
)
def test_a_delegation_never_widens_the_budget(budget: dict[str, Any] | None, code: str) -> None:
    """Mutants: no finding for a child without a budget under a budgeted parent; the amount
    compared with one unit of slack; the unit not compared. Rule: a child's budget is in the
    parent's unit and at most the parent's amount; no budget is no limit, so wider."""
    with pytest.raises(ScopeCreep) as raised:
        verify_chain(_budgeted_chain(budget), ROOT.public, now=NOW + 1)
    assert raised.value.finding.code == code


def test_a_delegation_may_keep_the_whole_budget() -> None:
    """Mutant: ``>=`` for ``>`` in the budget comparison. Rule: an equal budget attenuates."""
    chain = verify_chain(_budgeted_chain({"amount": 1000, "unit": "calls"}), ROOT.public, now=NOW + 1)
    assert [b.amount for _, b in chain.budgets] == [1000, 1000]


def test_a_signed_invocation_living_longer_than_five_minutes_is_refused(repo: GrantRepository) -> None:
    """Mutant: ``_decide`` checks only ``0 < exp - iat`` (drops ``<= 300``). Rule: an invocation
    lives 1 to 300 s, also one built in Python, whose nonce would otherwise be kept as long as
    it claims to live."""
    chain = _two_links(tip_ttl=600)
    long = replace(Invocation.sign(BOB, chain, CALL, now=NOW), expires=NOW + 301)
    long = replace(long, signature=BOB.sign(INVOCATION_CONTEXT + long.payload))
    d = decide(long, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.findings[0].code == "invocation_lifetime"
