"""Grants and chains: issuing, delegation refusals, strict parsing, and the bad-input list."""

from __future__ import annotations

import hashlib
import hmac
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.authority import (
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    delegate,
    issue,
    parse_chain,
    verify_chain,
)
from agentgate.authority._encoding import b64url_decode, b64url_encode, canonical_json
from agentgate.authority._grant import (
    GRANT_CONTEXT,
    TOKEN_PREFIX,
    _anchors,
    _bindings_open,
    _encode_chain,
    _grant_from_canonical,
    _parse_grant_reference,
    _sign_open,
    parse_grant,
)
from agentgate.capabilities import Capability
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
    from agentgate.authority import _grant

    work: list[str] = []
    for name in ("b64url_decode_parts", "b64url_decode", "parse_grant", "verify_signature"):
        real = getattr(_grant, name)
        monkeypatch.setattr(_grant, name, lambda *a, _n=name, _f=real, **k: work.append(_n) or _f(*a, **k))
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
