"""Canonical bytes and strict parsing: the low-level half of docs/token-format.md.

Canonical JSON here is exactly ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` encoded as UTF-8. Inside tokens only integers appear as
numbers (floats are refused), so the bytes are the same in every language that sorts keys by code
point and writes integers in plain decimal. Parsing is the strict inverse: duplicate keys, floats,
NaN, bad UTF-8 and any byte that differs from the canonical re-encoding are refused.

The acceptance rules are written here, not left to a library, because the refusals are the
product: a lenient JSON or base64 decoder is exactly how "reordered keys" and "trailing bytes" get
through. orjson only speeds up the common case of ``parse_canonical`` (bytes that are already
canonical); it accepts nothing the reference check would refuse (see its docstring).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from agentgate._json import MAX_DEPTH, is_plain, once_each
from agentgate._shown import quoted
from agentgate.errors import TokenFormatError
from agentgate.keys import did_refusal

_B64URL_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


DIGEST_HEX = re.compile(r"[0-9a-f]{64}")
"""A SHA-256 digest as tokens write it (a grant id, an arguments digest): 64 lower-case hex digits."""
NONCE_HEX = re.compile(r"[0-9a-f]{32}")
"""A nonce as tokens write it: 32 lower-case hex digits."""

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of ``value``; raises ``TokenFormatError`` for NaN, infinities or bad text.

    Values made only of dicts, lists, strings, integers, booleans and ``None`` are written by
    orjson, whose sorted output is byte-identical to the reference encoder for them (see
    ``parse_canonical``); anything else (floats, tuples, subclasses, integers beyond 64 bits,
    lone surrogates) goes through the reference encoder.
    """
    if is_plain(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass  # the reference encoder decides (and names the problem)
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError) as exc:
        raise TokenFormatError(f"value cannot be encoded canonically: {exc}") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# The key cut (``quoted``): the refusal reaches the gateway's 401 body and the audit log twice,
# for a caller nobody has authenticated yet; a 4 KB key made a 4,100-character one until review R89.
_pairs = once_each(lambda key: TokenFormatError(f"duplicate key {quoted(key)}"))


def _no_float(text: str) -> Any:
    raise TokenFormatError(f"non-integer number {text[:40]!r}: tokens carry integers only")


def _no_constant(text: str) -> Any:
    raise TokenFormatError(f"{text} is not allowed in a token")


_DECODER = json.JSONDecoder(parse_float=_no_float, parse_constant=_no_constant)


def _holds_float(value: dict[str, Any]) -> bool:
    """Whether a parsed JSON object contains a float anywhere (tokens carry integers only)."""
    stack: list[Any] = [value]
    while stack:
        container = stack.pop()
        for item in container.values() if type(container) is dict else container:
            kind = type(item)
            if kind is float:
                return True
            if kind is dict or kind is list:
                stack.append(item)
    return False


def read_sorted_object(data: bytes) -> dict[str, Any] | None:
    """``data`` parsed by orjson when it is a JSON object whose sorted re-encoding by orjson is
    byte-for-byte ``data``; ``None`` otherwise (the reference steps decide). Never raises.

    The fast paths' shared first step: without floats orjson writes exactly the canonical form
    (``parse_canonical``), so the caller accepts the value only once it has refused floats, by
    ``_holds_float`` or by checking every value's exact type.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(value) is not dict:
        return None
    try:
        if orjson.dumps(value, option=orjson.OPT_SORT_KEYS) != data:
            return None
    except TypeError:  # pragma: no cover - orjson refuses to write what it parsed; the reference decides
        return None
    return value


def parse_canonical(data: bytes, what: str) -> dict[str, Any]:
    """Parse one canonical JSON object; refuses anything that is not byte-for-byte canonical.

    Fast path: orjson parses, and the value is accepted when it holds no float and orjson's
    sorted re-encoding is byte-for-byte ``data``. For values without floats orjson writes exactly
    the canonical form (same escapes, keys sorted by code point, plain decimal integers; checked
    against ``canonical_json`` for every Unicode scalar value as key and as string, and for
    64-bit integers), so the fast path accepts exactly what the reference check accepts. Anything else (duplicate keys,
    whitespace, floats, integers beyond 64 bits, bad UTF-8...) takes the reference path below,
    which decides and names the problem: Python's parser with floats refused, then the
    comparison with ``canonical_json``. Duplicate keys cannot survive that comparison (the
    parser keeps one of them, so the bytes differ); the duplicate-detecting parse runs only to
    name the problem in the error.
    """
    fast = read_sorted_object(data)
    if fast is not None and not _holds_float(fast):
        return fast
    return _parse_canonical_reference(data, what)


def _nested_deeper_than(data: bytes, limit: int) -> bool:
    """Whether JSON text ``data`` opens more than ``limit`` arrays and objects one inside another
    (brackets inside strings not counted), read without parsing and without recursion. Counting
    the brackets first settles almost every payload in one C pass; the byte walk runs only for
    one holding more than ``limit`` of them (at most 8 KiB: ``parse_grant`` checks the size)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for byte in data:  # UTF-8 puts no ASCII byte inside a multi-byte character
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x5B or byte == 0x7B:  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte == 0x5D or byte == 0x7D:  # ] }
            depth -= 1
    return False


def _parse_canonical_reference(data: bytes, what: str) -> dict[str, Any]:
    """The reference check of ``parse_canonical`` (Python's parser and ``canonical_json``).

    A payload nested more than ``MAX_DEPTH`` levels deep (254, the payload object counting as
    one: orjson's own limit, so the fast path accepts no deeper one either) is refused before
    Python's parser, which recurses once per level, reads it: until review R85 an ``ext`` nested
    ~960 levels deep verified from a shallow caller and was refused, "maximum recursion depth
    exceeded", from one 60 frames deeper."""
    if _nested_deeper_than(data, MAX_DEPTH):
        raise TokenFormatError(f"{what}: JSON nested more than {MAX_DEPTH} levels deep")
    try:
        text = data.decode("utf-8")
        value = _DECODER.decode(text)
    except TokenFormatError as exc:
        raise TokenFormatError(f"{what}: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TokenFormatError(f"{what}: not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(value, dict):
        raise TokenFormatError(f"{what}: expected a JSON object")
    try:
        canonical = canonical_json(value)
    except TokenFormatError as exc:
        # JSON can escape a lone surrogate (``"\ud800"``), which no UTF-8 text holds. Until review
        # R68 the encoder's words alone were the refusal, naming neither the link nor the token.
        unicode = isinstance(exc.__cause__, UnicodeEncodeError)
        why = "a string is not valid Unicode text (an escaped lone surrogate)" if unicode else str(exc)
        raise TokenFormatError(f"{what}: {why}") from None
    if canonical != data:
        try:
            json.loads(text, object_pairs_hook=_pairs)
        except TokenFormatError as exc:
            raise TokenFormatError(f"{what}: {exc}") from None
        raise TokenFormatError(f"{what}: bytes are not in canonical form (key order, whitespace or escapes)")
    return value


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_B64URL_VALUE = {chr(c): i for i, c in enumerate(_B64URL_ALPHABET)}


def b64url_decode(text: str, what: str) -> bytes:
    """Strict unpadded base64url: only the alphabet, no padding, canonical trailing bits.

    The last character of a text whose length is 2 or 3 mod 4 carries 4 or 2 unused bits, which
    must be zero: otherwise two texts would decode to the same bytes.
    """
    rest = len(text) % 4
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        raise TokenFormatError(f"{what}: not unpadded base64url") from None
    # Deleting every alphabet byte must leave nothing (one C pass, no regex).
    if rest == 1 or data.translate(None, _B64URL_ALPHABET):
        raise TokenFormatError(f"{what}: not unpadded base64url")
    if rest and _B64URL_VALUE[text[-1]] & (0x0F if rest == 2 else 0x03):
        raise TokenFormatError(f"{what}: base64url is not canonical (stray trailing bits)")
    try:
        return binascii.a2b_base64(data.translate(_FROM_URLSAFE) + b"=" * (-rest % 4), strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the checks above exclude these
        raise TokenFormatError(f"{what}: not unpadded base64url") from exc


_TOKEN_ALPHABET = _B64URL_ALPHABET + b"."
_STANDARD_ALPHABET = _B64URL_ALPHABET.translate(_FROM_URLSAFE)
_STANDARD_VALUE = bytes(max(_STANDARD_ALPHABET.find(b), 0) for b in range(256))
"""Standard base64 byte -> its 6-bit value (0 for other bytes, which never reach the lookup)."""


def b64url_decode_parts(text: str) -> list[bytes] | None:
    """Every ``.``-separated part of ``text`` decoded exactly as ``b64url_decode`` would, or
    ``None`` when any part would be refused (``b64url_decode`` then names the problem).

    One pass checks the alphabet and one maps base64url to standard base64 for all parts.
    """
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    if data.translate(None, _TOKEN_ALPHABET):
        return None
    out = []
    for part in data.translate(_FROM_URLSAFE).split(b"."):
        rest = len(part) % 4
        if rest == 1 or (rest and _STANDARD_VALUE[part[-1]] & (0x0F if rest == 2 else 0x03)):
            return None
        try:
            out.append(binascii.a2b_base64(part + b"=" * (-rest % 4), strict_mode=True))
        except (binascii.Error, ValueError):  # pragma: no cover - the checks above exclude these
            return None
    return out


def require(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """Field ``name`` of ``obj`` with the given JSON type (booleans are never integers)."""
    if name not in obj:
        raise TokenFormatError(f"{what}: missing field {name!r}")
    value = obj[name]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise TokenFormatError(f"{what}: field {name!r} has the wrong type")
    if not isinstance(value, kind):
        raise TokenFormatError(f"{what}: field {name!r} has the wrong type")
    return value


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_DIGITS = bytes(_B58.index(chr(b)) if chr(b) in _B58 else 0xFF for b in range(256))
"""Byte -> base58 digit value; 0xFF for bytes outside the alphabet."""
_DID_PREFIX = "did:key:z"
_ED25519_HEAD = 0xED01 << 256
_MAX_DID = 0xED02 << 256


def did_public_key(did: str) -> bytes:
    """The raw Ed25519 key inside a ``did:key``, checked strictly; ``TokenFormatError`` otherwise.

    Same rules as ``agentgate.keys.public_key_from_did`` (multicodec ``0xed01``, canonical
    base58btc), decoded with integer arithmetic: it runs on every link of every cold decision.
    A spelling is canonical exactly when it has no leading ``1`` (a zero byte, impossible before
    ``0xed``) and its value lies in the 34-byte range that starts with ``0xed01``. A refusal says
    what ``keys.did_refusal`` says: text that looks like a key itself is not quoted (a private
    key given after ``did:`` as an audience or a trust anchor was, until review R86b), and what is
    not text is named by its type (bytes holding a seed were quoted until review R86c).
    """
    if not isinstance(did, str) or not did.startswith(_DID_PREFIX) or not 40 < len(did) <= 64:
        raise TokenFormatError(did_refusal("not an Ed25519 did:key", did))
    # One C pass maps the characters to digit values (0xFF: not base58); then two digits per step.
    digits = did[len(_DID_PREFIX) :].encode("ascii", "replace").translate(_B58_DIGITS)
    if 0xFF in digits:
        raise TokenFormatError(did_refusal("did:key is not valid base58btc", did))
    pairs = iter(digits)
    value = next(pairs) if len(digits) % 2 else 0
    for high, low in zip(pairs, pairs, strict=True):
        value = value * 3364 + high * 58 + low
    if did[len(_DID_PREFIX)] == "1" or not _ED25519_HEAD <= value < _MAX_DID:
        raise TokenFormatError(
            did_refusal("did:key does not hold an Ed25519 public key in canonical form", did)
        )
    return (value - _ED25519_HEAD).to_bytes(32, "big")
