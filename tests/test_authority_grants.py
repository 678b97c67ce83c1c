"""Grants and chains: issuing, delegation refusals, strict parsing, and the bad-input list."""

from __future__ import annotations

import hashlib
import hmac
import json
import tracemalloc
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.authority import (
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    ChainCache,
    GrantRepository,
    Invocation,
    Outcome,
    decide,
    delegate,
    issue,
    parse_chain,
    record,
    verify_chain,
)
from agentgate.authority._encoding import b64url_decode, b64url_encode, canonical_json, sha256_hex
from agentgate.authority._grant import GRANT_CONTEXT, TOKEN_PREFIX, _encode_chain
from agentgate.authority._operations import _sign
from agentgate.authority._parsing import _grant_from_canonical, _parse_grant_reference, parse_grant
from agentgate.authority._signatures import _anchors, _bindings_open, _sign_open
from agentgate.capabilities import Call, Capability
from agentgate.errors import (
    AuthorityError,
    CapabilityError,
    Denied,
    Expired,
    InvalidSignature,
    ScopeCreep,
    TokenFormatError,
)
from agentgate.findings import Finding, FindingKind
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB, CAROL = (SigningKey(bytes([i]) * 32) for i in range(1, 5))
REFUND = "tool:payments.refund?amount<=500&currency=EUR|USD"
L = 2**252 + 27742317777372353535851937790883648493  # order of the Ed25519 base point


def root_chain(**kw: object) -> Chain:
    args: dict[str, object] = {"ttl": 3600, "budget": Budget(1_000_000), "max_depth": 2, "now": NOW}
    args.update(kw)
    return issue(ROOT, ALICE.did, [REFUND, "tool:search.*"], **args)  # type: ignore[arg-type]


def two_links() -> Chain:
    return delegate(
        root_chain(), ALICE, BOB.did, ["tool:payments.refund?amount<=100&currency=EUR"], ttl=600, now=NOW
    )


def signed_link(key: SigningKey, body: dict[str, object]) -> tuple[bytes, bytes]:
    payload = canonical_json(body)
    return payload, key.sign(GRANT_CONTEXT + payload)


def token_of(*links: tuple[bytes, bytes]) -> str:
    return ".".join(
        [TOKEN_PREFIX] + [part for p, s in links for part in (b64url_encode(p), b64url_encode(s))]
    )


def root_body() -> dict[str, object]:
    return json.loads(root_chain().root.payload)  # type: ignore[no-any-return]


def finding(exc: pytest.ExceptionInfo[AuthorityError]) -> Finding:
    assert isinstance(exc.value.finding, Finding)
    return exc.value.finding


# --- the good path --------------------------------------------------------------------------------


def test_issue_delegate_verify_round_trip() -> None:
    chain = two_links()
    assert verify_chain(chain.token, ROOT.public, now=NOW + 1) == chain
    assert parse_chain(chain.token) == chain
    assert chain.holder == BOB.did
    assert chain.links[1].parent == chain.root.id
    assert chain.root.id == hashlib.sha256(chain.root.payload).hexdigest()
    assert chain.links[1].budget == Budget(1_000_000)  # inherited, never wider


def test_payload_is_canonical_json_with_sorted_keys() -> None:
    payload = root_chain().root.payload
    assert payload == json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":")).encode()
    assert set(json.loads(payload)) == {"v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce",
                                        "purpose", "parent"}  # fmt: skip


# --- delegation refuses anything that does not attenuate, naming the field ----------------------------


@pytest.mark.parametrize(
    ("caps", "kw", "code", "field"),
    [
        (["tool:payments.*"], {}, "capability_widened", "capabilities"),
        (["tool:shell.run"], {}, "capability_widened", "capabilities"),
        (["tool:payments.refund?amount<=900&currency=EUR"], {}, "constraint_widened", "constraints.amount"),
        (["tool:payments.refund?amount<=100"], {}, "constraint_widened", "constraints.currency"),
        (
            ["tool:payments.refund?amount<=100&currency=EUR|GBP"],
            {},
            "constraint_widened",
            "constraints.currency",
        ),
        (["tool:search.web"], {"budget": Budget(2_000_000)}, "budget_widened", "budget"),
        (["tool:search.web"], {"budget": Budget(10, "calls")}, "budget_unit_changed", "budget"),
        (["tool:search.web"], {"ttl": 7200}, "outlives_parent", "expiry"),
        (["tool:search.web"], {"max_depth": 2}, "depth_widened", "max_depth"),
    ],
)
def test_delegation_that_widens_is_refused_naming_the_field(
    caps: list[str], kw: dict[str, object], code: str, field: str
) -> None:
    args: dict[str, object] = {"ttl": 600, "now": NOW}
    args.update(kw)
    with pytest.raises(ScopeCreep) as exc:
        delegate(root_chain(), ALICE, BOB.did, caps, **args)  # type: ignore[arg-type]
    assert (finding(exc).code, finding(exc).field) == (code, field)
    assert finding(exc).kind in (FindingKind.SCOPE_CREEP, FindingKind.NON_REVOCABLE_GRANT)


def test_child_never_outlives_parent() -> None:
    with pytest.raises(ScopeCreep) as exc:
        delegate(root_chain(ttl=60), ALICE, BOB.did, ["tool:search.web"], ttl=61, now=NOW)
    assert finding(exc).kind is FindingKind.NON_REVOCABLE_GRANT
    assert finding(exc).code == "outlives_parent"


def test_only_the_audience_can_delegate() -> None:
    with pytest.raises(Denied) as exc:
        delegate(root_chain(), BOB, CAROL.did, ["tool:search.web"], ttl=60, now=NOW)
    assert finding(exc).kind is FindingKind.IMPLICIT_TRUST_INHERITANCE
    assert finding(exc).code == "not_the_audience"


def test_self_delegation_and_cycles_are_refused() -> None:
    with pytest.raises(Denied) as exc:
        delegate(root_chain(), ALICE, ALICE.did, ["tool:search.web"], ttl=60, now=NOW)
    assert finding(exc).code == "self_delegation"
    chain = two_links()
    with pytest.raises(Denied) as exc:
        delegate(chain, BOB, ALICE.did, ["tool:payments.refund?amount<=10&currency=EUR"], ttl=60, now=NOW)
    assert finding(exc).code == "delegation_cycle"


def test_depth_zero_cannot_delegate() -> None:
    with pytest.raises(ScopeCreep) as exc:
        delegate(root_chain(max_depth=0), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    assert finding(exc).code == "delegation_not_allowed"


def test_expired_parent_cannot_delegate() -> None:
    with pytest.raises(Expired):
        delegate(root_chain(ttl=10), ALICE, BOB.did, ["tool:search.web"], ttl=5, now=NOW + 10)


def test_hand_built_widening_link_is_refused_at_verification() -> None:
    parent = root_chain()
    body = json.loads(parent.root.payload)
    body.update(iss=ALICE.did, aud=BOB.did, parent=parent.root.id, depth=1,
                caps=[{"resource": "tool:payments.refund", "action": "invoke", "constraints": {}}])  # fmt: skip
    token = token_of((parent.root.payload, parent.root.signature), signed_link(ALICE, body))
    with pytest.raises(ScopeCreep) as exc:
        verify_chain(token, ROOT.public, now=NOW)
    assert finding(exc).code == "constraint_widened"


# --- signatures: unsigned, other key, HMAC, Wycheproof-style malformed ---------------------------------


def _with_signature(sig: bytes) -> str:
    root = root_chain().root
    return token_of((root.payload, sig))


def _verify_fails(token: str) -> None:
    with pytest.raises((TokenFormatError, AuthorityError)):
        verify_chain(token, ROOT.public, now=NOW)


def test_unsigned_token_is_refused() -> None:
    root = root_chain().root
    with pytest.raises(TokenFormatError):
        parse_chain(f"{TOKEN_PREFIX}.{b64url_encode(root.payload)}")
    with pytest.raises(TokenFormatError, match="64 bytes"):
        verify_chain(_with_signature(b""), ROOT.public, now=NOW)


def test_signature_by_another_key_is_refused() -> None:
    root = root_chain().root
    with pytest.raises(InvalidSignature) as exc:
        verify_chain(_with_signature(CAROL.sign(GRANT_CONTEXT + root.payload)), ROOT.public, now=NOW)
    assert finding(exc).kind is FindingKind.AUTHORITY_CHAIN_OPACITY


def test_signature_without_domain_separation_is_refused() -> None:
    root = root_chain().root
    _verify_fails(_with_signature(ROOT.sign(root.payload)))


def test_hmac_signed_with_the_public_key_and_an_alg_field_are_refused() -> None:
    body = root_body()
    body["alg"] = "HS256"
    payload = canonical_json(body)
    mac = hmac.new(ROOT.public.raw, payload, hashlib.sha256).digest()
    _verify_fails(token_of((payload, mac)))
    _verify_fails(token_of((payload, mac + mac)))  # 64 bytes, Ed25519-sized
    with pytest.raises(TokenFormatError, match="unknown field"):
        parse_chain(token_of(signed_link(ROOT, body)))  # even when properly signed


@pytest.mark.parametrize("field", ["jwk", "kid", "key", "x5u"])
def test_embedded_keys_and_key_ids_are_refused(field: str) -> None:
    body = root_body()
    body[field] = "../../../../etc/agentgate/root.pub" if field != "jwk" else {"kty": "OKP", "x": "AAAA"}
    with pytest.raises(TokenFormatError, match="unknown field"):
        parse_chain(token_of(signed_link(ROOT, body)))


def _malformed_signatures() -> list[tuple[str, bytes]]:
    root = root_chain().root
    sig = root.signature
    s = int.from_bytes(sig[32:], "little")
    return [
        ("truncated", sig[:-1]),
        ("trailing byte", sig + b"\x00"),
        ("non-canonical S (S + L)", sig[:32] + (s + L).to_bytes(32, "little")),
        ("S = L", sig[:32] + L.to_bytes(32, "little")),
        ("all zero", bytes(64)),
        ("R is the identity point", (1).to_bytes(32, "little") + sig[32:]),
        ("flipped bit in R", bytes([sig[0] ^ 1]) + sig[1:]),
        ("flipped bit in S", sig[:40] + bytes([sig[40] ^ 1]) + sig[41:]),
        ("all ones", b"\xff" * 64),
    ]


@pytest.mark.parametrize(
    ("name", "sig"), _malformed_signatures(), ids=[n for n, _ in _malformed_signatures()]
)
def test_wycheproof_style_malformed_signatures_are_refused(name: str, sig: bytes) -> None:
    # wrong lengths are malformed bytes; well-formed but invalid ones fail verification
    with pytest.raises(TokenFormatError if len(sig) != 64 else InvalidSignature):
        verify_chain(_with_signature(sig), ROOT.public, now=NOW)


def test_the_direct_libsodium_call_agrees_with_pynacls_binding() -> None:
    """``_sign_open`` (crypto_sign_open with no output buffer) answers as nacl.bindings does."""
    root = root_chain().root
    message = GRANT_CONTEXT + root.payload
    small_order_key = (1).to_bytes(32, "little")  # the identity point
    cases = [(root.signature, ROOT.public.raw, True)]
    cases += [(sig, ROOT.public.raw, False) for _, sig in _malformed_signatures() if len(sig) == 64]
    cases += [(root.signature, ALICE.public.raw, False), (root.signature, small_order_key, False)]
    for signature, key, valid in cases:
        assert _sign_open(signature + message, key) is valid
        assert _bindings_open(signature + message, key) is valid


def test_trust_anchors_carry_their_keys_and_refuse_bad_dids() -> None:
    anchors = _anchors([ROOT.public, ALICE.did, BOB])  # type: ignore[list-item]
    assert anchors == frozenset({ROOT.did, ALICE.did, BOB.did})
    assert anchors.public_keys == {k.did: k.public.raw for k in (ROOT, ALICE, BOB)}
    with pytest.raises(TokenFormatError, match="trust anchor"):
        _anchors(["did:key:zNotAKey"])


# --- strict encoding -----------------------------------------------------------------------------------


def test_reordered_keys_are_refused_even_when_signed() -> None:
    body = root_body()
    payload = json.dumps(dict(reversed(list(body.items()))), separators=(",", ":")).encode()
    with pytest.raises(TokenFormatError, match="canonical"):
        parse_chain(token_of((payload, ROOT.sign(GRANT_CONTEXT + payload))))


def test_whitespace_and_escapes_are_refused() -> None:
    body = root_body()
    for payload in (json.dumps(body, sort_keys=True).encode(), canonical_json(body) + b" ",
                    canonical_json(body).replace(b'"v"', b'"\\u0076"')):  # fmt: skip
        with pytest.raises(TokenFormatError):
            parse_grant(payload, ROOT.sign(GRANT_CONTEXT + payload))


def test_duplicate_keys_are_refused() -> None:
    payload = canonical_json(root_body())
    duplicated = payload[:-1] + b',"v":1}'
    with pytest.raises(TokenFormatError, match="duplicate"):
        parse_grant(duplicated, ROOT.sign(GRANT_CONTEXT + duplicated))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"v": 2}, "version"),
        ({"v": True}, "version"),
        ({"crit": ["x-geo"], "ext": {"x-geo": "eu"}}, "critical"),
        ({"flags": 1}, "unknown field"),
        ({"exp": None}, "exp"),
        ({"exp": 1.5e9}, "integer"),
        ({"budget": {"amount": -1, "unit": "usd_micros"}}, "budget"),
        ({"budget": {"amount": 2**63, "unit": "usd_micros"}}, "budget"),
        ({"budget": {"amount": 1.5, "unit": "usd_micros"}}, "integer"),
        ({"budget": {"amount": 5, "unit": "usd_micros", "extra": 1}}, "budget"),
        ({"depth": 99}, "depth"),
        ({"nonce": "zz"}, "nonce"),
        ({"parent": "../x"}, "parent"),
        ({"iss": "did:key:z6Mk/../../root"}, "iss"),
    ],
)
def test_payload_fields_are_checked_strictly(change: dict[str, object], message: str) -> None:
    body = root_body()
    body.update(change)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    payload = text.encode()
    with pytest.raises(TokenFormatError, match=message):
        parse_grant(payload, ROOT.sign(GRANT_CONTEXT + payload))


def test_unknown_token_version_and_trailing_bytes_are_refused() -> None:
    token = root_chain().token
    for bad in ("ag2" + token[3:], token + ".", token + "\n", token + "=", token + ".AAAA", " " + token):
        with pytest.raises(TokenFormatError):
            parse_chain(bad)


def test_non_canonical_base64_is_refused() -> None:
    assert b64url_decode("AA", "x") == b"\x00"
    for bad in ("AB", "AA==", "A", "A+", "A/"):
        with pytest.raises(TokenFormatError):
            b64url_decode(bad, "x")


def test_oversized_token_is_refused_before_decoding() -> None:
    with pytest.raises(TokenFormatError, match="limit"):
        parse_chain(TOKEN_PREFIX + "." + "A" * MAX_TOKEN_BYTES)


def test_ten_thousand_link_chain_is_refused_in_bounded_time_and_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = root_chain().root
    link = f"{b64url_encode(root.payload)}.{b64url_encode(root.signature)}"
    huge = ".".join([TOKEN_PREFIX] + [link] * 10_000)
    # Bounded time, observed as work not done rather than as wall time (which measures the
    # machine): no link is decoded, parsed or has its signature checked before the refusal.
    from agentgate.authority import _chain_findings, _parsing

    work: list[str] = []
    for module, name in (
        (_parsing, "b64url_decode_parts"),
        (_parsing, "b64url_decode"),
        (_parsing, "parse_grant"),
        (_chain_findings, "verify_signature"),
    ):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _n=name, _f=real, **k: work.append(_n) or _f(*a, **k))
    tracemalloc.start()
    with pytest.raises(TokenFormatError, match="limit"):
        verify_chain(huge, ROOT.public, now=NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000  # nothing was split or decoded: the size check came first
    assert work == []
    monkeypatch.undo()
    # just under the byte limit, the link count is still checked before any signature
    compact = ".".join([TOKEN_PREFIX] + ["AA.AA"] * 5000)
    with pytest.raises(TokenFormatError, match="16 links"):
        parse_chain(compact)


# --- chain structure ------------------------------------------------------------------------------------


def test_reordered_spliced_and_truncated_chains_are_refused() -> None:
    chain = delegate(
        two_links(), BOB, CAROL.did, ["tool:payments.refund?amount<=50&currency=EUR"], ttl=60, now=NOW
    )
    links = [(g.payload, g.signature) for g in chain.links]
    with pytest.raises(Denied) as exc:
        verify_chain(token_of(links[1], links[0], links[2]), ROOT.public, now=NOW)
    assert finding(exc).code == "root_has_parent"
    with pytest.raises(Denied) as exc:
        verify_chain(token_of(links[0], links[2]), ROOT.public, now=NOW)
    assert finding(exc).code == "parent_mismatch"
    other = delegate(root_chain(purpose="other"), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    with pytest.raises(Denied) as exc:
        verify_chain(
            token_of(links[0], (other.links[1].payload, other.links[1].signature)), ROOT.public, now=NOW
        )
    assert finding(exc).code == "parent_mismatch"
    # dropping the last narrowing link leaves a valid chain, but for the previous holder only
    assert verify_chain(token_of(*links[:2]), ROOT.public, now=NOW).holder == BOB.did


def test_untrusted_root_is_refused() -> None:
    chain = issue(CAROL, ALICE.did, ["tool:*"], ttl=60, now=NOW)
    with pytest.raises(Denied) as exc:
        verify_chain(chain, ROOT.public, now=NOW)
    assert (finding(exc).kind, finding(exc).code) == (FindingKind.AUTHORITY_CHAIN_OPACITY, "untrusted_root")


def test_expired_and_not_yet_valid_grants_are_refused() -> None:
    chain = root_chain(ttl=100)
    verify_chain(chain, ROOT.public, now=NOW + 99)
    with pytest.raises(Expired):
        verify_chain(chain, ROOT.public, now=NOW + 100)
    verify_chain(chain, ROOT.public, now=NOW - 30)  # within the skew tolerance
    with pytest.raises(Expired) as exc:
        verify_chain(chain, ROOT.public, now=NOW - 31)
    assert finding(exc).code == "grant_not_yet_valid"


# --- budgets and values -----------------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [-1, 1.5, float("nan"), float("inf"), 2**63, True, "5"])
def test_bad_budget_amounts_are_refused(amount: object) -> None:
    with pytest.raises(TokenFormatError):
        Budget(amount)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text", ["-5", "1.5", "nan", "inf", "9223372036854775808", "1e3", "", "5:EUR", " 5x"]
)
def test_bad_budget_text_is_refused(text: str) -> None:
    with pytest.raises(TokenFormatError):
        Budget.parse(text)


def test_budget_text_grammar() -> None:
    assert Budget.parse("500000") == Budget(500000, "usd_micros")
    assert Budget.parse("10:calls") == Budget(10, "calls")
    assert Budget.parse("9223372036854775807").amount == 2**63 - 1


def test_non_integer_constraint_values_are_refused_in_tokens() -> None:
    with pytest.raises(CapabilityError, match="integers only"):
        issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500.5"], ttl=60, now=NOW)
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500.0"], ttl=60, now=NOW)
    assert chain.root.capabilities == (Capability.parse("tool:payments.refund?amount<=500"),)


def test_zero_or_negative_ttl_is_refused() -> None:
    for ttl in (0, -5):
        with pytest.raises(TokenFormatError):
            issue(ROOT, ALICE.did, ["tool:x"], ttl=ttl, now=NOW)


# --- properties -----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(position=st.integers(min_value=0), replacement=st.sampled_from("AQgw_-.x="))
def test_any_single_character_change_is_refused(position: int, replacement: str) -> None:
    token = two_links().token
    i = position % len(token)
    mutated = token[:i] + replacement + token[i + 1 :]
    if mutated == token:
        return
    with pytest.raises((TokenFormatError, AuthorityError)):
        verify_chain(mutated, ROOT.public, now=NOW)


@settings(max_examples=40, deadline=None)
@given(
    amount=st.integers(min_value=0, max_value=2**63 - 1),
    limit=st.integers(min_value=-(2**62), max_value=2**62),
    depth=st.integers(min_value=0, max_value=15),
    purpose=st.text(max_size=40),
)
def test_serialize_then_parse_is_the_identity(amount: int, limit: int, depth: int, purpose: str) -> None:
    chain = issue(ROOT, ALICE.did, [f"tool:x?n<={limit}"], ttl=60, budget=Budget(amount, "tokens"),
                  max_depth=depth, purpose=purpose, now=NOW)  # fmt: skip
    assert parse_chain(chain.token) == chain
    assert _encode_chain(chain.links) == chain.token


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=0, max_value=1000),
    budget=st.integers(min_value=0, max_value=2_000_000),
    exp=st.integers(min_value=NOW + 1, max_value=NOW + 7200),
    depth=st.integers(min_value=0, max_value=3),
)
def test_a_link_verifies_exactly_when_it_attenuates(limit: int, budget: int, exp: int, depth: int) -> None:
    """Hand-built child links (no ``delegate`` checks): verification accepts exactly the narrowing ones."""
    parent = root_chain()  # amount<=500, budget 1_000_000, expires NOW+3600, depth 2
    body = json.loads(parent.root.payload)
    body.update(iss=ALICE.did, aud=BOB.did, parent=parent.root.id, exp=exp, depth=depth, nbf=NOW,
                budget={"amount": budget, "unit": "usd_micros"},
                caps=[{"resource": "tool:payments.refund", "action": "invoke",
                       "constraints": {"amount": {"le": limit}, "currency": {"eq": "EUR"}}}])  # fmt: skip
    token = token_of((parent.root.payload, parent.root.signature), signed_link(ALICE, body))
    narrows = limit <= 500 and budget <= 1_000_000 and exp <= NOW + 3600 and depth <= 1
    try:
        verify_chain(token, ROOT.public, now=NOW)
        verified = True
    except AuthorityError:
        verified = False
    assert verified == narrows


# --- the fast parsing path agrees with the reference steps ---------------------------------------------------

LEAVES = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) + 1, -(2**63), 0, 1, -1]),
    st.text(max_size=4),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
SPECS = st.dictionaries(
    st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix", "ne"]),
    st.one_of(LEAVES, st.lists(st.one_of(LEAVES, st.sampled_from(["EUR", "USD", 1, 1])), max_size=3)),
    max_size=3,
)
CAPABILITY_OBJECTS = st.one_of(
    st.fixed_dictionaries(
        {
            "resource": st.sampled_from(
                ["tool:payments.refund", "tool:search.*", "tool:*", "Tool:x", "tool:a/b"]
            ),
            "action": st.sampled_from(["invoke", "*", "", "Invoke"]),
            "constraints": st.dictionaries(
                st.sampled_from(["amount", "currency", "a.b", "1x"]), SPECS, max_size=2
            ),
        }
    ),
    st.dictionaries(st.sampled_from(["resource", "action", "constraints", "x"]), LEAVES, max_size=3),
)
VALID_CAPABILITIES = st.sampled_from(
    [
        Capability.parse(text).to_dict()
        for text in (
            REFUND,
            "tool:search.*",
            "tool:*#*",
            "tool:x?s^=ab&n>0&n<=9",
            "model:m?k=1|2|x",
            "tool:y?b=true",
        )
    ]
)
FIELD_VALUES: dict[str, st.SearchStrategy[object]] = {
    "v": st.sampled_from([1, 2, True, 1.0]),
    "iss": st.sampled_from([ALICE.did, BOB.did, ALICE.did + "x", "did:key:z", 5]),
    "aud": st.sampled_from([BOB.did, CAROL.did, BOB.did.upper(), None]),
    "caps": st.lists(st.one_of(VALID_CAPABILITIES, CAPABILITY_OBJECTS), max_size=3),
    "budget": st.one_of(
        st.none(),
        st.fixed_dictionaries({"amount": LEAVES, "unit": st.sampled_from(["usd_micros", "Calls", "", 1])}),
        st.dictionaries(st.sampled_from(["amount", "unit", "x"]), LEAVES, max_size=3),
    ),
    "nbf": st.one_of(st.sampled_from([NOW, 0, -1, 2**40, True]), LEAVES),
    "exp": st.sampled_from([NOW + 600, NOW, 2**40 - 1, 2**40, 1.5]),
    "depth": st.sampled_from([0, 1, 15, 16, -1, False]),
    "nonce": st.sampled_from(["0" * 32, "A" * 32, "0" * 31, 0]),
    "purpose": st.one_of(st.text(max_size=3), st.just("p" * 257)),
    "parent": st.sampled_from([None, "a" * 64, "A" * 64, "a" * 63, 7]),
    "ext": st.dictionaries(st.text(max_size=2), LEAVES, max_size=1),
    "crit": st.lists(st.text(max_size=2), max_size=1),
}


def _assert_fast_path_agrees(payload: bytes, signature: bytes) -> bool:
    """The fast path returns a grant only when the reference steps accept an equal one (types and
    normal forms included); returns whether it took the payload."""
    fast = _grant_from_canonical(payload, signature)
    if fast is None:
        return False
    reference = _parse_grant_reference(payload, signature, "grant")
    assert repr(fast) == repr(reference)
    assert fast == reference
    normals = [[repr(c._normal) for _, c in cap.constraints] for cap in fast.capabilities]
    assert normals == [[repr(c._normal) for _, c in cap.constraints] for cap in reference.capabilities]
    return True


@settings(max_examples=600, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(FIELD_VALUES)), st.integers(0, 2**32), max_size=3),
    st.data(),
    st.sampled_from(["canonical", "spaced", "drop"]),
)
def test_fast_grant_parsing_accepts_only_what_the_reference_accepts(
    changed: dict[str, int], data: st.DataObject, spelling: str
) -> None:
    body = json.loads(two_links().tip.payload)
    for name in changed:
        body[name] = data.draw(FIELD_VALUES[name], label=name)
    if spelling == "drop":
        body.pop(data.draw(st.sampled_from(sorted(body))))
    try:
        payload = canonical_json(body)
    except TokenFormatError:
        payload = json.dumps(body, sort_keys=True).encode("utf-8", "surrogatepass")
    if spelling == "spaced":
        payload = json.dumps(body, sort_keys=True).encode("utf-8", "surrogatepass")
    _assert_fast_path_agrees(payload, ALICE.sign(GRANT_CONTEXT + payload))


def test_fast_grant_parsing_takes_the_common_shapes() -> None:
    """Every link the engine issues (sets, single values, bounds, wildcards, budgets or none) takes
    the fast path and parses to the same grant as the reference steps."""
    chain = delegate(
        issue(ROOT, ALICE.did, [REFUND, "tool:search.*", "tool:*#read?q^=abc", "model:Qwen/Qwen3-32B?n>=1&n<9"],
              ttl=600, now=NOW),
        ALICE, BOB.did, ["tool:payments.refund?amount<=100&currency=EUR", "tool:search.web"], ttl=60, now=NOW,
    )  # fmt: skip
    for link in chain.links:
        assert _assert_fast_path_agrees(link.payload, link.signature)


# --- hand-built tokens ---------------------------------------------------------------------------
# Tokens built by hand and signed by the trust anchor, so that nothing but the format or link rule
# under test can refuse them: a refusal by any other check would hide what the test pins.

ROOT_KEY, ALICE_KEY, BOB_KEY, CAROL_KEY = (SigningKey(bytes([i]) * 32) for i in range(71, 75))
CAP = {"resource": "tool:pay", "action": "invoke", "constraints": {"amount": {"le": 500}}}


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "iss": ROOT_KEY.did,
        "aud": ALICE_KEY.did,
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
    return _token((ROOT_KEY, canonical_json(_body(**changes))))


def _refused(token: str) -> None:
    with pytest.raises(TokenFormatError):
        parse_chain(token)
    with pytest.raises(TokenFormatError):
        verify_chain(token, ROOT_KEY.public, now=NOW + 1)


def _linked_token(*links: tuple[SigningKey, dict[str, Any]]) -> str:
    """A chain of hand-built links, each payload canonical JSON signed by the key given with it;
    each link after the first names the previous one as its parent."""
    parts = ["ag1"]
    previous: bytes | None = None
    for key, body in links:
        if previous is not None:
            body = {**body, "parent": sha256_hex(previous)}
        payload = canonical_json(body)
        parts += [b64url_encode(payload), b64url_encode(key.sign(GRANT_CONTEXT + payload))]
        previous = payload
    return ".".join(parts)


def _refusal(token: str) -> str:
    with pytest.raises(AuthorityError) as raised:
        verify_chain(token, ROOT_KEY.public, now=NOW + 1)
    return raised.value.finding.code  # type: ignore[attr-defined]


def test_the_hand_built_root_is_accepted_as_it_is() -> None:
    """Control for the refusals below: the unedited hand-built root verifies (fast path too)."""
    chain = verify_chain(_root(), ROOT_KEY.public, now=NOW + 1)
    assert _grant_from_canonical(chain.root.payload, chain.root.signature) is not None


def test_a_grant_whose_expiry_equals_its_not_before_is_refused() -> None:
    """Mutants: nbf < exp relaxed to nbf <= exp (reference path, or fast path). Rule: a grant
    lives at least one second (0 <= nbf < exp < 2**40)."""
    _refused(_root(exp=NOW))


def test_a_grant_allowing_more_than_fifteen_further_levels_is_refused() -> None:
    """Mutants: depth bound MAX_DEPTH + 1 (reference path, or fast path). Rule: depth is 0..15."""
    _refused(_root(depth=16))
    assert verify_chain(_root(depth=15), ROOT_KEY.public, now=NOW + 1).root.max_depth == 15


def test_a_grant_naming_seventeen_capabilities_is_refused() -> None:
    """Mutant: fast path counts caps up to MAX_CAPABILITIES + 1. Rule: 1 to 16 capabilities."""
    caps = [{"resource": f"tool:t{i}", "action": "invoke", "constraints": {}} for i in range(17)]
    _refused(_root(caps=caps))
    assert len(verify_chain(_root(caps=caps[:16]), ROOT_KEY.public, now=NOW + 1).root.capabilities) == 16


def test_a_negative_budget_is_refused() -> None:
    """Mutant: the fast path drops the 0 <= amount <= 2**63-1 check. Rule: budgets are non-negative."""
    _refused(_root(budget={"amount": -1, "unit": "calls"}))
    _refused(_root(budget={"amount": 2**63, "unit": "calls"}))


@pytest.mark.parametrize(
    "budget",
    [{"amount": -1, "unit": "calls"}, {"amount": 2**63, "unit": "calls"}, {"amount": 5, "unit": "Calls"}],
)
def test_a_bad_budget_is_refused_naming_its_link(budget: dict[str, Any]) -> None:
    """Every other field's refusal names its link; a budget's said only "budget amount -1 is
    outside ...", so in a chain of several links nobody could tell which one. Rule: a refusal
    names what and where."""
    token = _linked_token(
        (ROOT_KEY, _body()), (ALICE_KEY, _body(iss=ALICE_KEY.did, aud=BOB_KEY.did, depth=0, budget=budget))
    )
    with pytest.raises(TokenFormatError, match=r"^link 1: budget "):
        parse_chain(token)


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
        _refused(_token((ROOT_KEY, payload)))


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
    assert verify_chain(_root(caps=[cap]), ROOT_KEY.public, now=NOW + 1).root.audience == ALICE_KEY.did
    _refused(_root(caps=[cap], aud="did:key:zNotAKey"))
    _refused(_root(aud="did:key:zNotAKey"))


def test_a_token_ending_in_an_unsigned_payload_is_refused() -> None:
    """Mutant: parse_chain drops the even-parts check (then fails with an IndexError, or reads a
    link without its signature). Rule: ag1 followed by payload.signature pairs."""
    token = _root()
    _refused(token + "." + token.split(".")[1])


# --- link checks of hand-built chains ------------------------------------------------------------


def test_a_link_signed_by_anyone_but_the_parents_audience_is_refused() -> None:
    """Mutant: ``link_findings`` drops the ``child.issuer != parent.audience`` check. Rule: only
    the holder of a grant may extend it; Bob, validly signing a child of Alice's grant (naming it
    as parent), gets nothing."""
    root = _body()
    hijack = _body(iss=BOB_KEY.did, aud=CAROL_KEY.did, depth=0)
    assert _refusal(_linked_token((ROOT_KEY, root), (BOB_KEY, hijack))) == "issuer_not_parent_audience"
    verify_chain(
        _linked_token((ROOT_KEY, root), (ALICE_KEY, _body(iss=ALICE_KEY.did, aud=CAROL_KEY.did, depth=0))),
        ROOT_KEY.public,
        now=NOW + 1,
    )


def test_a_parent_allowing_no_delegation_is_named_as_such() -> None:
    """Mutant: ``link_findings`` drops the ``parent.max_depth == 0`` finding (the depth check that
    follows still refuses, as ``depth_widened``). Rule: a child of a depth-0 grant is refused as
    ``delegation_not_allowed``, the finding the docs name for it."""
    token = _linked_token(
        (ROOT_KEY, _body(depth=0)), (ALICE_KEY, _body(iss=ALICE_KEY.did, aud=BOB_KEY.did, depth=0))
    )
    assert _refusal(token) == "delegation_not_allowed"


def test_a_delegation_from_a_parent_starting_soon_starts_with_its_parent() -> None:
    """Mutant: ``delegate`` gives the child ``not_before=start`` instead of the later of now and
    the parent's start. Rule: a parent starting within the skew is delegable at once, and the
    child starts no earlier than the parent (else it is refused as ``starts_before_parent``)."""
    root = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW + 20)
    child = delegate(root, ALICE_KEY, BOB_KEY.did, ["tool:pay?amount<=100"], ttl=600, now=NOW)
    assert child.tip.not_before == NOW + 20
    verify_chain(child.token, ROOT_KEY.public, now=NOW + 20)


# --- attenuation of budgets ----------------------------------------------------------------------


def _budgeted_chain(child_budget: dict[str, Any] | None) -> str:
    root = canonical_json(_body(budget={"amount": 1000, "unit": "calls"}))
    child = _body(iss=ALICE_KEY.did, aud=BOB_KEY.did, depth=0, parent=sha256_hex(root), budget=child_budget)
    return _token((ROOT_KEY, root), (ALICE_KEY, canonical_json(child)))


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
        verify_chain(_budgeted_chain(budget), ROOT_KEY.public, now=NOW + 1)
    assert raised.value.finding.code == code


def test_a_delegation_may_keep_the_whole_budget() -> None:
    """Mutant: ``>=`` for ``>`` in the budget comparison. Rule: an equal budget attenuates."""
    chain = verify_chain(_budgeted_chain({"amount": 1000, "unit": "calls"}), ROOT_KEY.public, now=NOW + 1)
    assert [b.amount for _, b in chain.budgets] == [1000, 1000]


# --- links forged by the parent's holder ------------------------------------------------------


@pytest.fixture
def repo(sqlite_store: SQLiteStore) -> GrantRepository:
    return GrantRepository(sqlite_store)


def _decide(
    repo: GrantRepository, key: SigningKey, chain: Chain, call: Call, now: int = NOW + 1
) -> tuple[Outcome, str | None]:
    """Sign ``call`` as ``key`` under ``chain`` and decide it: its outcome and first finding's code."""
    inv = Invocation.sign(key, chain, call, now=now)
    d = decide(inv, repo=repo, trusted=ROOT_KEY.public, now=now, cache=ChainCache())
    return d.outcome, (d.findings[0].code if d.findings else None)


def _forged_child(parent: Chain, **changes: object) -> Chain:
    """A child link signed by the parent's holder (ALICE) with fields delegate() would never pick."""
    tip = parent.tip
    fields: dict[str, object] = {
        "audience": BOB_KEY.did,
        "capabilities": [Capability.parse("tool:payments.refund?amount<=100")],
        "budget": tip.budget,
        "not_before": tip.not_before,
        "expires": tip.expires,
        "max_depth": 0,
        "purpose": "",
        "parent": tip.id,
    }
    fields.update(changes)
    grant = _sign(ALICE_KEY, **fields)  # type: ignore[arg-type]
    links = (*parent.links, grant)
    return Chain(links, _encode_chain(links))


def _refund_root() -> Chain:
    return issue(
        ROOT_KEY,
        ALICE_KEY.did,
        ["tool:payments.refund?amount<=500"],
        ttl=3600,
        budget=Budget(1_000_000),
        now=NOW,
    )


def test_a_budget_one_unit_above_the_parent_is_refused() -> None:
    """Kills G4 (``link_findings``: ``child.budget.amount > parent.budget.amount + 1``)."""
    root = _refund_root()
    kept = delegate(
        root,
        ALICE_KEY,
        BOB_KEY.did,
        ["tool:payments.refund?amount<=100"],
        ttl=60,
        budget=Budget(1_000_000),
        now=NOW,
    )
    assert kept.tip.budget == Budget(1_000_000)
    with pytest.raises(ScopeCreep) as exc:
        delegate(
            root,
            ALICE_KEY,
            BOB_KEY.did,
            ["tool:payments.refund?amount<=100"],
            ttl=60,
            budget=Budget(1_000_001),
            now=NOW,
        )
    assert exc.value.finding.code == "budget_widened"  # type: ignore[attr-defined]


def test_a_child_without_a_budget_under_a_budgeted_parent_is_refused(repo: GrantRepository) -> None:
    """Kills G5 (``link_findings``: the ``child.budget is None`` check skipped): a child signed with
    no budget would spend without limit (``Decision.budgets`` would carry only the root's, but a
    root without one makes that nothing)."""
    chain = _forged_child(_refund_root(), budget=None)
    with pytest.raises(ScopeCreep) as exc:
        verify_chain(chain.token, ROOT_KEY.public, now=NOW + 1)
    assert exc.value.finding.code == "budget_widened"  # type: ignore[attr-defined]
    assert _decide(repo, BOB_KEY, chain, Call.tool("payments.refund", {"amount": 5})) == (
        Outcome.DENY,
        "budget_widened",
    )


def test_a_child_starting_one_second_before_its_parent_is_refused() -> None:
    """Kills G8 (``link_findings``: ``child.not_before < parent.not_before - 1``)."""
    root = _refund_root()
    same = _forged_child(root)
    assert verify_chain(same.token, ROOT_KEY.public, now=NOW + 1) == same
    early = _forged_child(root, not_before=root.tip.not_before - 1)
    with pytest.raises(ScopeCreep) as exc:
        verify_chain(early.token, ROOT_KEY.public, now=NOW + 1)
    assert exc.value.finding.code == "starts_before_parent"  # type: ignore[attr-defined]


def test_every_capability_of_a_delegation_is_checked_not_only_the_first(repo: GrantRepository) -> None:
    """Kills G15 (``link_findings`` checks ``child.capabilities[:1]`` only): a narrow first
    capability would smuggle a second one the parent never held."""
    root = _refund_root()
    with pytest.raises(ScopeCreep) as exc:
        delegate(
            root,
            ALICE_KEY,
            BOB_KEY.did,
            ["tool:payments.refund?amount<=100", "tool:shell.run"],
            ttl=60,
            now=NOW,
        )
    assert exc.value.finding.code == "capability_widened"  # type: ignore[attr-defined]
    forged = _forged_child(
        root,
        capabilities=[
            Capability.parse("tool:payments.refund?amount<=100"),
            Capability.parse("tool:shell.run"),
        ],
    )
    assert _decide(repo, BOB_KEY, forged, Call.tool("shell.run")) == (Outcome.DENY, "capability_widened")


def _lying(chain: Chain, **fields: object) -> Chain:
    """``chain`` with its tip's fields edited, its signed payload, signature and token kept."""
    return Chain((*chain.links[:-1], replace(chain.tip, **fields)), chain.token)


@pytest.mark.parametrize(
    "fields",
    [
        {"expires": NOW + 3600},  # the parent's: the signed tip expired at NOW + 600
        {"capabilities": (Capability.parse("tool:payments.refund?amount<=500&currency=EUR"),)},
        {"audience": CAROL.did},
        {"max_depth": 0},
    ],
    ids=lambda fields: next(iter(fields)),
)
def test_a_chain_object_whose_fields_are_not_its_tokens_is_refused_where_it_is_trusted(
    fields: dict[str, object], tmp_path: Any
) -> None:
    """R53: ``verify_chain``, ``delegate`` and ``record`` read a ``Chain`` object's fields, never
    its token's: a chain whose tip's expiry was edited verified after it expired, one whose
    capabilities were widened let its holder sign a delegation wider than the signed grant, and
    ``record`` stored the edited audience (which ``revoke_holder`` reads). Decisions already
    verify from the token (``tip_mismatch``); these now refuse such an object the same way."""
    chain = two_links()
    lying = _lying(chain, **fields)
    later = NOW + 1800 if "expires" in fields else NOW + 1
    with pytest.raises(Denied, match="tip_mismatch"):
        verify_chain(lying, ROOT.did, now=later)
    with pytest.raises(Denied, match="tip_mismatch"):
        delegate(lying, BOB, CAROL.did, ["tool:payments.refund?amount<=5&currency=EUR"], ttl=60, now=NOW + 1)
    with SQLiteStore(tmp_path / "g.db") as store:
        repo = GrantRepository(store)
        with pytest.raises(Denied, match="tip_mismatch"):
            record(repo, lying, now=NOW)
        assert store.query("SELECT count(*) FROM agentgate_grants")[0][0] == 0
        record(repo, chain, now=NOW)
    assert verify_chain(chain, ROOT.did, now=NOW + 1) == chain
