"""What a second implementation written from docs/token-format.md needs.

A verifier written from the page alone (PyNaCl or pyca/cryptography for Ed25519) disagreed with
agentgate where the page was silent or loose, and passed every vector with an Ed25519 library
that accepts small-order keys, which the page forbids.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentgate.authority import Invocation, issue, parse_chain, verify_chain
from agentgate.authority._chain_findings import chain_finding
from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey, did_from_public_key

ROOT_DIR = Path(__file__).resolve().parents[1]
PAGE = (ROOT_DIR / "docs" / "token-format.md").read_text()
CASES = ROOT_DIR / "tests" / "vectors" / "cases"
GRANT_CONTEXT = b"agentgate/grant/v1\x00"
INVOCATION_CONTEXT = b"agentgate/invocation/v1\x00"
IDENTITY = (1).to_bytes(32, "little")
NOW = 1_800_000_000
ROOT, ALICE = SigningKey(b"\x01" * 32), SigningKey(b"\x02" * 32)


def case(name: str) -> dict[str, Any]:
    return json.loads((CASES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def openssl_accepts(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except Exception:
        return False
    return True


def grant(aud: str, caps: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "v": 1, "iss": ROOT.did, "aud": aud, "budget": None, "nbf": NOW - 60, "exp": NOW + 3600,
        "caps": caps or [{"resource": "tool:x", "action": "invoke", "constraints": {}}],
        "depth": 2, "nonce": "0" * 31 + "1", "purpose": "", "parent": None, **fields,
    }  # fmt: skip


def token(*links: tuple[bytes, bytes]) -> str:
    return ".".join(["ag1"] + [b64url_encode(part) for payload, sig in links for part in (payload, sig)])


def signed(key: SigningKey, body: dict[str, Any]) -> tuple[bytes, bytes]:
    payload = canonical_json(body)
    return payload, key.sign(GRANT_CONTEXT + payload)


# --- the vectors pin the small-order-key rule -----------------------------------------------------


def test_a_chain_vector_refuses_a_link_signed_as_a_small_order_key_that_openssl_accepts() -> None:
    vector = case("sig-small-order-key")
    assert vector["expect"] == {"valid": False, "error": "bad_signature"}
    parts = vector["token"].split(".")
    child_payload, child_sig = b64url(parts[3]), b64url(parts[4])
    assert json.loads(child_payload)["iss"] == did_from_public_key(IDENTITY)
    # The case discriminates: a verifier without the small-order check accepts this signature.
    assert openssl_accepts(IDENTITY, child_sig, GRANT_CONTEXT + child_payload)
    chain = parse_chain(vector["token"])
    found = chain_finding(chain, frozenset(vector["trusted"]))
    assert found is not None and found.code == "bad_signature"


def test_a_decision_vector_refuses_an_invocation_by_a_small_order_holder_that_openssl_accepts() -> None:
    vector = case("decision-small-order-holder")
    assert vector["expect"] == {"outcome": "deny", "code": "bad_invocation_signature"}
    _, payload_b64, sig_b64 = vector["invocation"].split(".")
    payload, sig = b64url(payload_b64), b64url(sig_b64)
    assert json.loads(payload)["iss"] == did_from_public_key(IDENTITY)
    assert openssl_accepts(IDENTITY, sig, INVOCATION_CONTEXT + payload)
    chain = verify_chain(vector["token"], vector["trusted"], now=vector["now"])
    assert chain.holder == did_from_public_key(IDENTITY)  # only the signature stands in the way
    call = vector["call"]
    assert hashlib.sha256(canonical_json(call["args"])).hexdigest() == json.loads(payload)["args"]
    Invocation.decode(
        vector["invocation"], vector["token"], Call(call["resource"], call["action"], call["args"])
    )


def test_the_expired_vector_is_checked_at_the_expiry_instant_as_its_description_says() -> None:
    vector = case("expired")
    links = [json.loads(b64url(part)) for part in vector["token"].split(".")[1::2]]
    assert vector["now"] == min(link["exp"] for link in links)
    assert "after" not in vector["description"] and "at the child's expiry" in vector["description"]


def test_every_signature_is_checked_before_any_link_as_the_page_orders_the_steps() -> None:
    """Steps 4 (signatures) and 5 (links) run in that order over the whole chain: a verifier
    written from the page answers ``bad_signature`` for a widened link followed by a forged one.
    agentgate checked each link's signature and then its links, and answered
    ``capability_widened``."""
    vector = case("order-signature-before-links")
    assert vector["expect"] == {"valid": False, "error": "bad_signature"}
    anchors = frozenset(vector["trusted"])
    # The case discriminates: without the forged link, the widened one is the chain's failure.
    first_two = ".".join(vector["token"].split(".")[:5])
    widened = chain_finding(parse_chain(first_two), anchors)
    assert widened is not None and widened.code == "capability_widened"
    found = chain_finding(parse_chain(vector["token"]), anchors)
    assert found is not None and (found.code, found.grant) == (
        "bad_signature",
        parse_chain(vector["token"]).ids[2],
    )


# --- what the page now states, checked against agentgate ------------------------------------------


@pytest.mark.parametrize(
    ("value", "accepted"), [(2**63 - 1, True), (-(2**63) + 1, True), (2**63, False), (-(2**63), False)]
)
def test_constraint_integers_are_limited_to_the_range_the_page_states(value: int, accepted: bool) -> None:
    assert "`|v| < 2**63`" in PAGE
    cap = {"resource": "tool:x", "action": "invoke", "constraints": {"n": {"le": value}}}
    tok = token(signed(ROOT, grant(ALICE.did, [cap])))
    if accepted:
        assert verify_chain(tok, [ROOT.did], now=NOW).holder == ALICE.did
    else:
        with pytest.raises(TokenFormatError, match="out of range"):
            parse_chain(tok)


@pytest.mark.parametrize(
    ("cap", "accepted"),
    [
        ({"resource": "gpu:h100", "action": "lease"}, True),
        ({"resource": "gpu:H100", "action": "lease"}, False),  # GPU names follow the tool grammar
        ({"resource": "model:meta/Llama-3.1:8b", "action": "generate"}, True),
        ({"resource": "model:meta/../x", "action": "generate"}, False),
        ({"resource": "tool:a.*", "action": "*"}, True),
        ({"resource": "tool:a", "action": "Invoke"}, False),
        ({"resource": "tool:a", "action": "invoke", "constraints": {"a.b": {"eq": 1}}}, True),
        ({"resource": "tool:a", "action": "invoke", "constraints": {"a-b": {"eq": 1}}}, False),
    ],
)
def test_names_follow_the_grammar_the_page_states(cap: dict[str, Any], accepted: bool) -> None:
    for rule in (
        "`[a-z0-9][a-z0-9_-]*`",
        "`[A-Za-z0-9][A-Za-z0-9_-]*`",
        "`[a-z][a-z0-9_]*`",
        "`[A-Za-z_][A-Za-z0-9_]*`",
    ):
        assert rule in PAGE
    tok = token(signed(ROOT, grant(ALICE.did, [{"constraints": {}, **cap}])))
    if accepted:
        assert verify_chain(tok, [ROOT.did], now=NOW).holder == ALICE.did
    else:
        with pytest.raises(TokenFormatError):
            parse_chain(tok)


def test_a_did_key_holding_no_ed25519_key_is_refused_where_the_page_says() -> None:
    x25519 = "did:key:z6LSc1meEp8v3xCsnqdJi99Ymy5J4wb84vcFg23xnMsXT3PJ"  # multicodec 0xec 0x01
    assert "`did:key:z6LS...`, an X25519 key) passes steps 1-6" in PAGE
    root = signed(ROOT, grant(x25519))
    assert verify_chain(token(root), [ROOT.did], now=NOW).holder == x25519
    child = grant(ALICE.did, iss=x25519, parent=hashlib.sha256(root[0]).hexdigest(), depth=1)
    chain = parse_chain(token(root, (canonical_json(child), bytes(64))))
    found = chain_finding(chain, frozenset({ROOT.did}))
    assert found is not None and found.code == "bad_signature"


@pytest.mark.parametrize(("iat", "exp"), [(-5, 10), (2**40 - 10, 2**40)])
def test_invocation_times_outside_the_ranges_the_page_states_are_refused_on_the_wire(
    iat: int, exp: int
) -> None:
    assert "| `iat` | integer | signing time, `>= 0` |" in PAGE and "`exp < 2**40`" in PAGE
    root = signed(ROOT, grant(ALICE.did))
    payload = canonical_json({
        "v": 1, "iss": ALICE.did, "tip": hashlib.sha256(root[0]).hexdigest(), "res": "tool:x", "act": "invoke",
        "args": hashlib.sha256(b"{}").hexdigest(), "nonce": "0" * 32, "iat": iat, "exp": exp,
    })  # fmt: skip
    wire = f"agi1.{b64url_encode(payload)}.{b64url_encode(ALICE.sign(INVOCATION_CONTEXT + payload))}"
    with pytest.raises(TokenFormatError, match=r"0 <= iat < exp <= iat \+ 300 and exp < 2\*\*40"):
        Invocation.decode(wire, token(root), Call("tool:x", "invoke", {}))


@pytest.mark.parametrize(("now", "ttl", "within"), [(-5, 10, 0), (2**40 - 10, 60, 2**40 - 61)])
def test_an_invocation_the_wire_form_would_refuse_is_never_signed(now: int, ttl: int, within: int) -> None:
    """``Invocation.sign`` signed times the page's ranges exclude (``iat`` before 1970, ``exp``
    at 2**40 or later), whose wire form every verifier then refused with a message about
    ``iat < exp``, which held. Rule: what cannot be decoded is refused when signing, naming why."""
    chain = parse_chain(token(signed(ROOT, grant(ALICE.did, nbf=0, exp=2**40 - 1))))
    with pytest.raises(TokenFormatError, match=r"invocation times lie in 0 \.\. 2\*\*40-1"):
        Invocation.sign(ALICE, chain, Call("tool:x", "invoke", {}), now=now, ttl=ttl)
    signed_within = Invocation.sign(ALICE, chain, Call("tool:x", "invoke", {}), now=within, ttl=ttl)
    assert Invocation.decode(signed_within.encode(), chain, signed_within.call) == signed_within


@pytest.mark.parametrize(("now", "ttl"), [(-5, 3600), (2**40 - 10, 60), (2**70, 60)])
def test_grant_times_outside_the_format_are_refused_naming_the_range(now: int, ttl: int) -> None:
    """``issue`` refused them saying "expiry must be after not-before", which held: a demanding
    user read it as a bug in the order of their times. Rule: the error names the range."""
    with pytest.raises(TokenFormatError, match=r"grant times lie in 0 \.\. 2\*\*40-1"):
        issue(ROOT, ALICE.did, ["tool:x"], ttl=ttl, now=now)
