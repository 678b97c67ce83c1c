"""Invocations: the holder's signature over one concrete call (holder binding).

The caller signs the resource, action, SHA-256 of the canonical arguments, the chain's tip id, a
fresh nonce and the time. The signed bytes are always recomputed from the fields, never taken on
trust, so an ``Invocation`` whose fields were edited simply fails its signature check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from json.encoder import encode_basestring
from typing import Any, ClassVar

import orjson

from agentgate._json import canonical_json as entry_json
from agentgate.authority._encoding import (
    DIGEST_HEX,
    NONCE_HEX,
    b64url_decode,
    b64url_decode_parts,
    b64url_encode,
    parse_canonical,
    read_sorted_object,
    require,
    sha256_hex,
)
from agentgate.authority._grant import MAX_TIME, Chain
from agentgate.authority._operations import _as_chain, _did, _now, _signing_key
from agentgate.authority._signatures import _cached_key
from agentgate.capabilities import Call
from agentgate.capabilities._canonical import _prechecked
from agentgate.errors import InputError, TokenFormatError
from agentgate.keys import SIGNATURE_SIZE, SigningKey

INVOCATION_PREFIX = "agi1"
INVOCATION_CONTEXT = b"agentgate/invocation/v1\x00"
DEFAULT_INVOCATION_TTL = 60
MAX_INVOCATION_TTL = 300
MAX_INVOCATION_BYTES = 4096
_FIELDS = frozenset({"v", "iss", "tip", "res", "act", "args", "nonce", "iat", "exp"})


def args_digest(args: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the call's arguments.

    The bytes are the audit log's (``agentgate.audit.entry.canonical_json``: one encoder, so an
    allowed call's arguments can always be recorded, and its entry's ``args_digest`` is
    ``sha256:`` and this digest). Floats are allowed here and written as Python's shortest
    round-trip ``repr``; NaN and infinities, keys that are not strings, text that is not valid
    Unicode and values nested more than ``MAX_DEPTH`` (254) levels deep raise ``TokenFormatError``.
    """
    if type(args) is not dict:
        if not isinstance(args, Mapping):
            raise TokenFormatError("call arguments must be a JSON object")
        args = dict(args)
    try:
        return sha256_hex(entry_json(args))
    except InputError as exc:
        raise TokenFormatError(str(exc)) from None


@dataclass(frozen=True)
class Invocation:
    """A signed request to make ``call`` under the chain ``chain_token``."""

    chain_token: str
    call: Call
    """The call as the caller presents it (checked against the signed fields)."""
    issuer: str
    tip: str
    resource: str
    action: str
    args_digest: str
    nonce: str
    issued_at: int
    expires: int
    signature: bytes
    _decoded: ClassVar[bytes | None] = None
    """The payload bytes this invocation was decoded from, which ``_decode_common`` checked are
    exactly the canonical encoding of its fields (set on the instance there); ``None`` (this class
    default) for one built any other way, ``replace`` included, whose payload is computed from the
    fields. Not a dataclass field: equality, ``repr`` and ``asdict`` see the signed fields only."""

    @property
    def payload(self) -> bytes:
        """The signed bytes, recomputed from the fields (canonical JSON).

        Raises ``TokenFormatError`` when a field has the wrong type or a string cannot be encoded.
        """
        if self._decoded is not None:
            return self._decoded
        if type(self.issued_at) is not int or type(self.expires) is not int:
            raise TokenFormatError("invocation times must be integers")
        fields = (self.action, self.args_digest, self.issuer, self.nonce, self.resource, self.tip)
        for value in fields:
            if type(value) is not str:
                raise TokenFormatError("invocation fields must be strings")
        # Strings and integers only: orjson's sorted output is the canonical form (_encoding.py).
        try:
            return orjson.dumps(
                {
                    "act": self.action,
                    "args": self.args_digest,
                    "exp": self.expires,
                    "iat": self.issued_at,
                    "iss": self.issuer,
                    "nonce": self.nonce,
                    "res": self.resource,
                    "tip": self.tip,
                    "v": 1,
                }
            )
        except orjson.JSONEncodeError:  # a lone surrogate, or a time beyond 64 bits
            pass
        text = (
            f'{{"act":{encode_basestring(self.action)},"args":{encode_basestring(self.args_digest)},'
            f'"exp":{self.expires},"iat":{self.issued_at},"iss":{encode_basestring(self.issuer)},'
            f'"nonce":{encode_basestring(self.nonce)},"res":{encode_basestring(self.resource)},'
            f'"tip":{encode_basestring(self.tip)},"v":1}}'
        )
        try:
            return text.encode()
        except UnicodeEncodeError as exc:
            raise TokenFormatError(f"invocation field cannot be encoded: {exc}") from None

    @property
    def id(self) -> str:
        """SHA-256 of the signed bytes: what an approval or an audit entry binds to."""
        return sha256_hex(self.payload)

    @classmethod
    def sign(
        cls,
        key: SigningKey,
        chain: Chain | str,
        call: Call,
        *,
        now: float | None = None,
        ttl: int = DEFAULT_INVOCATION_TTL,
    ) -> Invocation:
        """Sign ``call`` as ``key`` under ``chain``, with a fresh 128-bit nonce, valid ``ttl`` seconds.

        Raises ``TokenFormatError`` for a ``ttl`` outside 1 to 300 and for times the wire form
        refuses (signed before 1970, or expiring at 2**40 or later)."""
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= MAX_INVOCATION_TTL:
            raise TokenFormatError(f"invocation ttl must be 1 to {MAX_INVOCATION_TTL} seconds")
        key = _signing_key(key, "the invocation's signer")
        if not isinstance(call, Call):
            raise InputError(
                f"Invocation.sign takes a Call (Call.tool, Call.model), got {type(call).__name__}"
            )
        parsed = _as_chain(chain)
        issued = _now(now)
        if not 0 <= issued < issued + ttl < MAX_TIME:  # what the wire form refuses is never signed
            raise TokenFormatError(
                f"invocation times lie in 0 .. 2**40-1 Unix seconds; signed at {issued}, expiring at {issued + ttl}"
            )
        unsigned = cls(
            chain_token=parsed.token,
            call=call,
            issuer=key.did,
            tip=parsed.id,
            resource=call.resource,
            action=call.action,
            args_digest=args_digest(call.args),
            nonce=os.urandom(16).hex(),
            issued_at=issued,
            expires=issued + ttl,
            signature=b"",
        )
        return replace(unsigned, signature=key.sign(INVOCATION_CONTEXT + unsigned.payload))

    def encode(self) -> str:
        """Wire form ``agi1.B64URL(payload).B64URL(signature)``; the chain and call travel beside it."""
        return f"{INVOCATION_PREFIX}.{b64url_encode(self.payload)}.{b64url_encode(self.signature)}"

    @classmethod
    def decode(cls, text: str, chain: Chain | str, call: Call) -> Invocation:
        """Parse the wire form strictly (no signature check: ``decide`` does that).

        Raises ``TokenFormatError`` for anything not exactly in the format.
        """
        token = chain.token if isinstance(chain, Chain) else chain
        # The fast path builds an ``Invocation``; a subclass gets its own class (and its
        # ``__post_init__``) from the reference steps.
        fast = _decode_common(text, token, call) if cls is Invocation else None
        return fast or cls._decode_reference(text, token, call)

    @classmethod
    def _decode_reference(cls, text: str, token: str, call: Call) -> Invocation:
        """The reference steps of ``decode``: they accept or name the problem."""
        if not isinstance(text, str) or len(text) > MAX_INVOCATION_BYTES or not text.isascii():
            raise TokenFormatError(
                f"an invocation is an ASCII string of at most {MAX_INVOCATION_BYTES} bytes"
            )
        parts = text.split(".")
        if len(parts) != 3 or parts[0] != INVOCATION_PREFIX:
            raise TokenFormatError(f"invocation must be {INVOCATION_PREFIX}.PAYLOAD.SIGNATURE")
        payload = b64url_decode(parts[1], "invocation")
        signature = b64url_decode(parts[2], "invocation signature")
        if len(signature) != SIGNATURE_SIZE:
            raise TokenFormatError(f"invocation: an Ed25519 signature is 64 bytes, got {len(signature)}")
        obj = parse_canonical(payload, "invocation")
        if obj.get("v") != 1 or isinstance(obj.get("v"), bool):
            raise TokenFormatError(f"invocation: unsupported version {obj.get('v')!r}")
        if set(obj) != _FIELDS:
            raise TokenFormatError(f"invocation: fields must be exactly {', '.join(sorted(_FIELDS))}")
        tip, digest, nonce = (require(obj, name, str, "invocation") for name in ("tip", "args", "nonce"))
        if (
            not DIGEST_HEX.fullmatch(tip)
            or not DIGEST_HEX.fullmatch(digest)
            or not NONCE_HEX.fullmatch(nonce)
        ):
            raise TokenFormatError("invocation: tip and args are 64 hex digits, nonce 32")
        issued, expires = (require(obj, name, int, "invocation") for name in ("iat", "exp"))
        if not 0 <= issued < expires < MAX_TIME or expires - issued > MAX_INVOCATION_TTL:
            raise TokenFormatError(
                f"invocation: need 0 <= iat < exp <= iat + {MAX_INVOCATION_TTL} and exp < 2**40 "
                f"(iat {issued}, exp {expires})"
            )
        return cls(
            chain_token=token,
            call=call,
            issuer=_did(require(obj, "iss", str, "invocation"), "invocation iss"),
            tip=tip,
            resource=require(obj, "res", str, "invocation"),
            action=require(obj, "act", str, "invocation"),
            args_digest=digest,
            nonce=nonce,
            issued_at=issued,
            expires=expires,
            signature=signature,
        )


_WIRE_PREFIX = INVOCATION_PREFIX + "."


def _decode_common(text: object, token: str, call: Call) -> Invocation | None:
    """``Invocation.decode`` for the common shape, or ``None`` when the reference steps must decide.

    Returns an invocation only when ``_decode_reference`` would return an equal one; never raises.
    Both parts are decoded in one pass (``b64url_decode_parts``: exactly the strict base64url of
    ``b64url_decode``); the payload is parsed by orjson and accepted only when every field has its
    exact type (strings, and integers that are not booleans: no float can hide) and orjson's sorted
    re-encoding is byte-for-byte the payload, as ``parse_canonical`` accepts it. The rest are the
    reference checks, in one pass. Decoding p50 27.5 -> 21 us (benchmarks/authority.py,
    ``invocation_decode``).
    """
    if type(text) is not str or len(text) > MAX_INVOCATION_BYTES or not text.startswith(_WIRE_PREFIX):
        return None
    parts = b64url_decode_parts(text[len(_WIRE_PREFIX) :])  # None for non-ASCII text too
    if parts is None or len(parts) != 2 or len(parts[1]) != SIGNATURE_SIZE:
        return None
    payload, signature = parts
    obj = read_sorted_object(payload)
    if obj is None or obj.keys() != _FIELDS:
        return None
    version, issuer, tip, resource, action = obj["v"], obj["iss"], obj["tip"], obj["res"], obj["act"]
    digest, nonce, issued, expires = obj["args"], obj["nonce"], obj["iat"], obj["exp"]
    if (
        type(version) is not int
        or version != 1
        or type(issuer) is not str
        or type(tip) is not str
        or type(resource) is not str
        or type(action) is not str
        or type(digest) is not str
        or type(nonce) is not str
        or type(issued) is not int
        or type(expires) is not int
        or not 0 <= issued < expires < MAX_TIME
        or expires - issued > MAX_INVOCATION_TTL
        or not DIGEST_HEX.fullmatch(tip)
        or not DIGEST_HEX.fullmatch(digest)
        or not NONCE_HEX.fullmatch(nonce)
    ):
        return None
    try:
        _cached_key(issuer)  # a did:key that holds an Ed25519 key, as ``_did`` checks
    except TokenFormatError:
        return None
    # Every field checked above, each of its exact type: built without the frozen dataclass's
    # ``__init__``, and with the payload bytes kept (what ``payload`` would compute again).
    return _prechecked(
        Invocation,
        chain_token=token,
        call=call,
        issuer=issuer,
        tip=tip,
        resource=resource,
        action=action,
        args_digest=digest,
        nonce=nonce,
        issued_at=issued,
        expires=expires,
        signature=signature,
        _decoded=payload,
    )
