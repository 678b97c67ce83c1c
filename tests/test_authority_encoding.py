"""The encodings inside tokens: canonical JSON (the orjson fast path accepts exactly what the
reference check accepts), base64url parts with one spelling each, and did:key identifiers."""

from __future__ import annotations

import json

import base58
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_authority_grants import ALICE_KEY, NOW, _refused, _root

from agentgate.authority import verify_chain
from agentgate.authority._encoding import (
    _parse_canonical_reference,
    b64url_decode,
    b64url_decode_parts,
    b64url_encode,
    canonical_json,
    did_public_key,
    parse_canonical,
)
from agentgate.errors import KeyFileError, TokenFormatError
from agentgate.keys import did_from_public_key, public_key_from_did

KEYS = st.text(max_size=6)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=4)


def _verdict(parse: object, data: bytes) -> object:
    try:
        return ("ok", parse(data, "payload"))  # type: ignore[operator]
    except TokenFormatError:
        return "refused"


@settings(max_examples=400, deadline=None)
@given(OBJECTS, st.sampled_from(["canonical", "spaced", "unsorted", "ascii", "duplicate"]))
def test_fast_path_agrees_with_the_reference(value: dict[str, object], spelling: str) -> None:
    if spelling == "canonical":
        try:
            data = canonical_json(value)
        except (TokenFormatError, TypeError, ValueError):
            data = json.dumps(value).encode()
    elif spelling == "spaced":
        data = json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    elif spelling == "unsorted":
        data = json.dumps(
            dict(reversed(list(value.items()))), separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8", "surrogatepass")
    elif spelling == "ascii":
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    else:
        body = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)[1:-1]
        data = ("{" + body + ("," if body else "") + '"k":1,"k":1}').encode("utf-8", "surrogatepass")
    assert _verdict(parse_canonical, data) == _verdict(_parse_canonical_reference, data)


def test_floats_and_duplicates_are_refused_on_both_paths() -> None:
    for data in (b'{"a":1.5}', b'{"a":1,"a":1}', b'{"a": 1}', b'{"b":1,"a":2}', b'{"a":1}x'):
        assert _verdict(parse_canonical, data) == "refused"
    assert _verdict(parse_canonical, b'{"a":1,"b":[true,null,"x"]}') == (
        "ok",
        {"a": 1, "b": [True, None, "x"]},
    )


# --- base64url of every part at once, and did:key decoding ------------------------------------------------

PART_TEXT = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.", max_size=24)
ODD_TEXT = st.text(alphabet="AQgw-_.+/=é \n", max_size=12)


def _one_by_one(text: str) -> list[bytes] | None:
    try:
        return [b64url_decode(part, "part") for part in text.split(".")]
    except TokenFormatError:
        return None


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        PART_TEXT,
        ODD_TEXT,
        st.binary(max_size=16).map(lambda b: b64url_encode(b) + "." + b64url_encode(b[::-1])),
    )
)
def test_decoding_all_parts_agrees_with_decoding_each(text: str) -> None:
    assert b64url_decode_parts(text) == _one_by_one(text)


def test_decoding_all_parts_refuses_what_each_refuses() -> None:
    good = b64url_encode(b"payload") + "." + b64url_encode(b"\xff" * 64)
    assert b64url_decode_parts(good) == [b"payload", b"\xff" * 64]
    for bad in (good + "=", good.replace("_", "/"), good + ".A", "QR.AA", "é"):
        assert b64url_decode_parts(bad) is None and _one_by_one(bad) is None


def _key_file_verdict(did: str) -> bytes | None:
    try:
        return public_key_from_did(did)
    except KeyFileError:
        return None


def _token_verdict(did: str) -> bytes | None:
    try:
        return did_public_key(did)
    except TokenFormatError:
        return None


KEYS_32 = st.binary(min_size=32, max_size=32)


@settings(max_examples=400, deadline=None)
@given(KEYS_32, st.integers(0, 60), st.sampled_from(["", "1", "z", "0", "l", "é", "11"]), st.booleans())
def test_did_decoding_agrees_with_the_key_module(
    raw: bytes, position: int, insert: str, replace: bool
) -> None:
    """The integer base58 decoder accepts exactly the canonical did:key strings, with the same key."""
    did = did_from_public_key(raw)
    assert _token_verdict(did) == raw
    cut = min(position, len(did))
    changed = did[:cut] + insert + did[cut + (1 if replace and insert else 0) :]
    assert _token_verdict(changed) == _key_file_verdict(changed)


# --- base64url parts and did:key in tokens ---------------------------------------------------------


_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


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
    respelled = ALICE_KEY.did[:9] + "1" + ALICE_KEY.did[9:]
    with pytest.raises(TokenFormatError):
        did_public_key(respelled)
    with pytest.raises(TokenFormatError):
        verify_chain(_root(), respelled, now=NOW + 1)


@pytest.mark.parametrize("codec", [b"\xed\x02", b"\xed\xff", b"\xec\x01", b"\x12\x00"])
def test_a_did_key_with_another_multicodec_is_refused(codec: bytes) -> None:
    """Mutant: the multicodec range widened (``0xed02`` to ``0xee01``). Rule: the did:key holds
    the multicodec ``0xed 0x01`` (Ed25519) and 32 key bytes, nothing else."""
    did = "did:key:z" + base58.b58encode(codec + ALICE_KEY.public.raw).decode()
    with pytest.raises(TokenFormatError):
        did_public_key(did)
    with pytest.raises(KeyFileError):
        public_key_from_did(did)
    assert did_public_key("did:key:z" + base58.b58encode(b"\xed\x01" + ALICE_KEY.public.raw).decode()) == (
        ALICE_KEY.public.raw
    )
