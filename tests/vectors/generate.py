"""Generate the token-format test vectors in tests/vectors/cases/ (docs/token-format.md).

Deterministic: fixed key seeds, fixed nonces and times, and Ed25519 signatures are deterministic,
so running it again rewrites the same bytes (tests/test_authority_vectors.py checks that).
Payloads are built here from plain dictionaries, not through agentgate's own issuing code, so
that the vectors pin the format rather than whatever the implementation happens to emit.

Each case is one JSON file::

    {"name", "description", "kind": "chain" | "decision",
     "token", "trusted": [did...], "now": int,
     "invocation", "call": {"resource", "action", "args"}     (decision cases only)
     "expect": {"valid": true, "ids": [...], "holder": did}    (chain, valid)
             | {"valid": false, "error": "format" | "<finding code>"}
             | {"outcome": "allow" | "deny", "code": "<finding code>"} (decision)}

Run: ``.venv/bin/python tests/vectors/generate.py`` (writes tests/vectors/cases/ and keys.json).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import nacl.signing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.keys import did_from_public_key

HERE = Path(__file__).resolve().parent
GRANT_CONTEXT = b"agentgate/grant/v1\x00"
INVOCATION_CONTEXT = b"agentgate/invocation/v1\x00"
NOW = 1_800_000_000
L = 2**252 + 27742317777372353535851937790883648493
IDENTITY = (1).to_bytes(32, "little")
"""The identity point: a small-order Ed25519 public key, and the R of a signature that verifies
under it with S = 0 for every message, unless the verifier refuses small-order keys."""


class Key:
    def __init__(self, name: str, seed_byte: int) -> None:
        self.name = name
        self.seed = bytes([seed_byte]) * 32
        self.signer = nacl.signing.SigningKey(self.seed)
        self.did = did_from_public_key(bytes(self.signer.verify_key))

    def sign(self, message: bytes) -> bytes:
        return bytes(self.signer.sign(message).signature)


ROOT, ALICE, BOB, MALLORY = Key("root", 1), Key("alice", 2), Key("bob", 3), Key("mallory", 4)


class SmallOrderKey(Key):
    """A principal whose public key is the identity point: anyone can "sign" as it."""

    def __init__(self) -> None:
        self.name = "small-order"
        self.did = did_from_public_key(IDENTITY)

    def sign(self, message: bytes) -> bytes:
        return IDENTITY + bytes(32)


SMALL = SmallOrderKey()

REFUND_500 = {
    "resource": "tool:payments.refund",
    "action": "invoke",
    "constraints": {"amount": {"le": 500}, "currency": {"in": ["EUR", "USD"]}},
}
REFUND_100 = {
    "resource": "tool:payments.refund",
    "action": "invoke",
    "constraints": {"amount": {"le": 100}, "currency": {"eq": "EUR"}},
}


def body(
    iss: Key, aud: Key, caps: list[dict[str, Any]], *, parent: str | None, nonce: int, **kw: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "v": 1,
        "iss": iss.did,
        "aud": aud.did,
        "caps": caps,
        "budget": {"amount": 1_000_000, "unit": "usd_micros"},
        "nbf": NOW - 60,
        "exp": NOW + 3600,
        "depth": 2,
        "nonce": f"{nonce:032x}",
        "purpose": "vector",
        "parent": parent,
    }
    out.update(kw)
    return out


def link(key: Key, payload: bytes) -> tuple[bytes, bytes]:
    return payload, key.sign(GRANT_CONTEXT + payload)


def token(*links: tuple[bytes, bytes], prefix: str = "ag1") -> str:
    return ".".join([prefix] + [p for pay, sig in links for p in (b64url_encode(pay), b64url_encode(sig))])


def gid(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def build_cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}

    def chain_case(name: str, description: str, tok: str, expect: dict[str, Any], now: int = NOW) -> None:
        cases[name] = {"name": name, "description": description, "kind": "chain", "token": tok,
                       "trusted": [ROOT.did], "now": now, "expect": expect}  # fmt: skip

    root_p = canonical_json(body(ROOT, ALICE, [REFUND_500], parent=None, nonce=1))
    root = link(ROOT, root_p)
    child_p = canonical_json(body(ALICE, BOB, [REFUND_100], parent=gid(root_p), nonce=2, exp=NOW + 600, depth=1,
                                  budget={"amount": 5000, "unit": "usd_micros"}))  # fmt: skip
    child = link(ALICE, child_p)
    good = token(root, child)

    chain_case("valid-root", "one root grant from the trust anchor", token(root),
               {"valid": True, "ids": [gid(root_p)], "holder": ALICE.did})  # fmt: skip
    chain_case("valid-two-links", "root grant and one attenuating delegation", good,
               {"valid": True, "ids": [gid(root_p), gid(child_p)], "holder": BOB.did})  # fmt: skip

    sig = root[1]
    s = int.from_bytes(sig[32:], "little")
    for name, bad_sig, description in [
        ("sig-other-key", MALLORY.sign(GRANT_CONTEXT + root_p), "signed by a key that is not the issuer"),
        ("sig-no-context", ROOT.sign(root_p), "signed without the domain-separation prefix"),
        ("sig-non-canonical-s", sig[:32] + (s + L).to_bytes(32, "little"), "S replaced by S + L"),
        ("sig-zero", bytes(64), "all-zero signature"),
        ("sig-r-identity", (1).to_bytes(32, "little") + sig[32:], "R replaced by the identity point"),
    ]:
        chain_case(name, description, token((root_p, bad_sig)), {"valid": False, "error": "bad_signature"})
    to_small_p = canonical_json(body(ROOT, SMALL, [REFUND_500], parent=None, nonce=10))
    to_small = link(ROOT, to_small_p)
    from_small_p = canonical_json(body(SMALL, BOB, [REFUND_100], parent=gid(to_small_p), nonce=11, exp=NOW + 600,
                                       depth=1, budget={"amount": 5000, "unit": "usd_micros"}))  # fmt: skip
    chain_case("sig-small-order-key", "child signed as a small-order key (identity point): R = identity, S = 0",
               token(to_small, link(SMALL, from_small_p)), {"valid": False, "error": "bad_signature"})  # fmt: skip
    for name, bad_sig, description in [
        ("sig-truncated", sig[:63], "63-byte signature"),
        ("sig-trailing-byte", sig + b"\x00", "65-byte signature"),
        ("sig-empty", b"", "empty signature"),
    ]:
        chain_case(name, description, token((root_p, bad_sig)), {"valid": False, "error": "format"})

    def signed_variant(name: str, description: str, payload: bytes) -> None:
        chain_case(name, description, token(link(ROOT, payload)), {"valid": False, "error": "format"})

    b = body(ROOT, ALICE, [REFUND_500], parent=None, nonce=1)
    signed_variant("reordered-keys", "payload keys not sorted (validly signed)",
                   json.dumps(dict(reversed(list(b.items()))), separators=(",", ":")).encode())  # fmt: skip
    signed_variant("duplicate-key", "a key appears twice (validly signed)", root_p[:-1] + b',"v":1}')
    signed_variant("whitespace", "JSON with spaces (validly signed)", json.dumps(b, sort_keys=True).encode())
    signed_variant("version-2", "payload version 2", canonical_json({**b, "v": 2}))
    signed_variant("alg-field", "an algorithm field (HS256)", canonical_json({**b, "alg": "HS256"}))
    signed_variant(
        "kid-path", "an embedded key id with a path", canonical_json({**b, "kid": "../../root.pub"})
    )
    signed_variant("crit-extension", "an unknown critical extension",
                   canonical_json({**b, "crit": ["x-geo"], "ext": {"x-geo": "eu"}}))  # fmt: skip
    signed_variant(
        "float-exp",
        "a non-integer number",
        canonical_json(b).replace(b'"exp":1800003600', b'"exp":1800003600.0'),
    )
    signed_variant(
        "budget-2-63",
        "budget amount 2**63",
        canonical_json({**b, "budget": {"amount": 2**63, "unit": "usd_micros"}}),
    )
    signed_variant(
        "budget-negative",
        "negative budget",
        canonical_json({**b, "budget": {"amount": -1, "unit": "usd_micros"}}),
    )
    signed_variant(
        "action-too-long",
        "a capability's action of 201 characters (at most 200)",
        canonical_json({**b, "caps": [{**REFUND_500, "action": "a" * 201}]}),
    )
    signed_variant(
        "argument-name-too-long",
        "a constraint's argument name of 201 characters (at most 200)",
        canonical_json({**b, "caps": [{**REFUND_500, "constraints": {"a" * 201: {"le": 500}}}]}),
    )
    signed_variant("no-expiry", "expiry missing", canonical_json({k: v for k, v in b.items() if k != "exp"}))
    chain_case("unsigned", "payload without a signature segment", f"ag1.{b64url_encode(root_p)}",
               {"valid": False, "error": "format"})  # fmt: skip
    chain_case("version-prefix-ag2", "unknown token version prefix", token(root, prefix="ag2"),
               {"valid": False, "error": "format"})  # fmt: skip
    chain_case(
        "trailing-bytes", "bytes after the last signature", good + "AA", {"valid": False, "error": "format"}
    )
    chain_case("trailing-segment", "an extra segment", good + ".AA", {"valid": False, "error": "format"})
    chain_case("padded-base64", "base64 with = padding", good + "==", {"valid": False, "error": "format"})

    chain_case("untrusted-root", "root issued by a key that is not a trust anchor",
               token(link(MALLORY, canonical_json(body(MALLORY, ALICE, [REFUND_500], parent=None, nonce=3)))),
               {"valid": False, "error": "untrusted_root"})  # fmt: skip
    chain_case(
        "reordered-links", "child first", token(child, root), {"valid": False, "error": "root_has_parent"}
    )
    other_root_p = canonical_json(body(ROOT, ALICE, [REFUND_500], parent=None, nonce=9))
    chain_case("spliced", "child of another chain's root attached to this root",
               token(root, link(ALICE, canonical_json(body(ALICE, BOB, [REFUND_100], parent=gid(other_root_p),
                                                           nonce=4, exp=NOW + 600, depth=1)))),
               {"valid": False, "error": "parent_mismatch"})  # fmt: skip

    def child_case(name: str, description: str, code: str, signer: Key = ALICE, **kw: Any) -> None:
        caps = kw.pop("caps", [REFUND_100])
        aud = kw.pop("aud", BOB)
        fields = {"exp": NOW + 600, "depth": 1, **kw}
        p = canonical_json(body(signer, aud, caps, parent=gid(root_p), nonce=5, **fields))
        chain_case(name, description, token(root, link(signer, p)), {"valid": False, "error": code})

    child_case("widened-constraint", "child allows amount <= 900", "constraint_widened",
               caps=[{**REFUND_500, "constraints": {"amount": {"le": 900}, "currency": {"eq": "EUR"}}}])  # fmt: skip
    child_case("widened-tool", "child names another tool", "capability_widened",
               caps=[{"resource": "tool:shell.run", "action": "invoke", "constraints": {}}])  # fmt: skip
    child_case("widened-budget", "child budget above the parent's", "budget_widened",
               budget={"amount": 2_000_000, "unit": "usd_micros"})  # fmt: skip
    child_case("outlives-parent", "child expires after its parent", "outlives_parent", exp=NOW + 7200)
    child_case("widened-depth", "child allows as many levels as its parent", "depth_widened", depth=2)
    child_case("self-delegation", "alice delegates to alice", "self_delegation", aud=ALICE)
    child_case("issuer-not-audience", "child signed by someone the parent did not name",
               "issuer_not_parent_audience", signer=MALLORY)  # fmt: skip
    shell = [{"resource": "tool:shell.run", "action": "invoke", "constraints": {}}]
    widened_p = canonical_json(body(ALICE, BOB, shell, parent=gid(root_p), nonce=6, exp=NOW + 600, depth=1))
    forged_p = canonical_json(
        body(BOB, MALLORY, shell, parent=gid(widened_p), nonce=8, exp=NOW + 600, depth=0)
    )
    chain_case("order-signature-before-links",
               "link 1 widens the tool (validly signed), link 2 is signed by another key than its issuer: "
               "every signature is checked (step 4) before any link (step 5)",
               token(root, link(ALICE, widened_p), (forged_p, MALLORY.sign(GRANT_CONTEXT + forged_p))),
               {"valid": False, "error": "bad_signature"})  # fmt: skip
    chain_case("expired", "checked at the child's expiry (no tolerance)", good, {"valid": False, "error": "grant_expired"},
               now=NOW + 600)  # fmt: skip
    chain_case("not-yet-valid", "checked 31 s before not-before (tolerance 30 s)", good,
               {"valid": False, "error": "grant_not_yet_valid"}, now=NOW - 91)  # fmt: skip

    # decisions: BOB invokes under the two-link chain
    call = {"resource": "tool:payments.refund", "action": "invoke", "args": {"amount": 50, "currency": "EUR"}}

    def invocation(signer: Key, call_: dict[str, Any], *, nonce: int = 7, iat: int = NOW, exp: int = NOW + 60,
                   tip: str | None = None) -> str:  # fmt: skip
        payload = canonical_json({
            "v": 1, "iss": signer.did, "tip": tip or gid(child_p), "res": call_["resource"], "act": call_["action"],
            "args": hashlib.sha256(canonical_json(call_["args"])).hexdigest(), "nonce": f"{nonce:032x}",
            "iat": iat, "exp": exp,
        })  # fmt: skip
        return f"agi1.{b64url_encode(payload)}.{b64url_encode(signer.sign(INVOCATION_CONTEXT + payload))}"

    def decision_case(name: str, description: str, inv: str, call_: dict[str, Any], outcome: str,
                      code: str | None = None, now: int = NOW, tok: str = good) -> None:  # fmt: skip
        cases[name] = {"name": name, "description": description, "kind": "decision", "token": tok,
                       "trusted": [ROOT.did], "now": now, "invocation": inv, "call": call_,
                       "expect": {"outcome": outcome, **({"code": code} if code else {})}}  # fmt: skip

    decision_case("decision-allow", "bob refunds 50 EUR", invocation(BOB, call), call, "allow")
    decision_case("decision-wrong-holder", "alice uses bob's chain", invocation(ALICE, call), call, "deny",
                  "wrong_holder")  # fmt: skip
    other_args = {**call, "args": {"amount": 99, "currency": "EUR"}}
    decision_case("decision-other-args", "signed for 50, presented with 99", invocation(BOB, call), other_args,
                  "deny", "args_digest_mismatch")  # fmt: skip
    other_tool = {**call, "resource": "tool:payments.charge"}
    decision_case("decision-other-tool", "signed for refund, presented as charge", invocation(BOB, call),
                  other_tool, "deny", "call_mismatch")  # fmt: skip
    decision_case("decision-not-covered", "amount 150 is above the grant's 100",
                  invocation(BOB, {**call, "args": {"amount": 150, "currency": "EUR"}}),
                  {**call, "args": {"amount": 150, "currency": "EUR"}}, "deny", "call_not_covered")  # fmt: skip
    decision_case("decision-invocation-expired", "decided at the invocation's expiry", invocation(BOB, call), call,
                  "deny", "invocation_expired", now=NOW + 60)  # fmt: skip
    decision_case("decision-clock-skew", "invocation dated 120 s in the future",
                  invocation(BOB, call, iat=NOW + 120, exp=NOW + 180), call, "deny", "invocation_not_yet_valid")  # fmt: skip
    forged = invocation(MALLORY, call)
    decision_case("decision-forged-signature", "bob's invocation with mallory's signature",
                  invocation(BOB, call).rsplit(".", 1)[0] + "." + forged.rsplit(".", 1)[1], call, "deny",
                  "bad_invocation_signature")  # fmt: skip
    decision_case("decision-small-order-holder", "invocation signed as a small-order key (identity point) holding the chain",
                  invocation(SMALL, call, tip=gid(to_small_p)), call, "deny", "bad_invocation_signature",
                  tok=token(to_small))  # fmt: skip
    lookalike = {**call, "resource": "tool:payments.refund\u200b"}
    decision_case("decision-lookalike-tool", "tool name with a zero-width space", invocation(BOB, lookalike),
                  lookalike, "deny", "ambiguous_resource")  # fmt: skip
    return cases


def keys() -> dict[str, Any]:
    return {k.name: {"seed": k.seed.hex(), "did": k.did} for k in (ROOT, ALICE, BOB, MALLORY)}


def write(directory: Path = HERE) -> list[Path]:
    """Write keys.json and one file per case under ``directory``; return the paths written."""
    (directory / "cases").mkdir(parents=True, exist_ok=True)
    written = [directory / "keys.json"]
    written[0].write_text(json.dumps(keys(), indent=2, sort_keys=True) + "\n")
    for name, case in sorted(build_cases().items()):
        path = directory / "cases" / f"{name}.json"
        path.write_text(json.dumps(case, indent=2, sort_keys=True, ensure_ascii=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    paths = write()
    print(f"wrote {len(paths)} files under {HERE}")
