"""Grants and chains: issuing, delegating, parsing and verifying (docs/token-format.md).

A grant is a canonical JSON payload signed with Ed25519 by its issuer; a chain is the root grant
followed by each delegation, each naming its parent by hash. The algorithm is fixed: nothing in a
token names an algorithm or carries a key the verifier would trust. The root issuer must be a
trust anchor the verifier was given; every later issuer must be the audience of the link before
it, whose key that link's (already verified) signer vouched for.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import numbers
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import nacl.bindings
import nacl.exceptions
import orjson

from agentgate._time import when
from agentgate.authority._encoding import (
    b64url_decode,
    b64url_decode_parts,
    b64url_encode,
    canonical_json,
    did_public_key,
    parse_canonical,
    sha256_hex,
)
from agentgate.capabilities import (
    Capability,
    attenuates,
    format_capability,
    pattern_within,
    witness,
)
from agentgate.capabilities._canonical import _prechecked, capability_from_canonical
from agentgate.errors import (
    AgentGateError,
    AuthorityError,
    CapabilityError,
    Denied,
    Expired,
    InputError,
    InvalidSignature,
    Revoked,
    ScopeCreep,
    TokenFormatError,
)
from agentgate.findings import Finding, FindingKind
from agentgate.keys import SIGNATURE_SIZE, PublicKey, SigningKey

VERSION = 1
TOKEN_PREFIX = "ag1"
_VERSION_FORMAT = re.compile(r"ag[0-9]{1,3}")
"""What a token version looks like (quoted in errors; other prefixes may be secrets)."""
GRANT_CONTEXT = b"agentgate/grant/v1\x00"
MAX_TOKEN_BYTES = 32 * 1024
MAX_LINKS = 16
MAX_DEPTH = MAX_LINKS - 1
MAX_PAYLOAD_BYTES = 8 * 1024
MAX_CAPABILITIES = 16
"""Per grant; bounds attenuation checking to 16 x 16 capability pairs per link."""
MAX_PURPOSE = 256
MAX_TIME = 2**40
MAX_AMOUNT = 2**63 - 1
DEFAULT_SKEW = 30
"""Seconds of clock skew tolerated on not-before and on invocation times (never on expiry)."""

_REQUIRED = frozenset(
    {"v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce", "purpose", "parent"}
)
_OPTIONAL = frozenset({"ext", "crit"})
_BUDGET_FIELDS = frozenset({"amount", "unit"})
_FIELD_ORDER = ("v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce", "purpose", "parent")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_DID_FORMAT = re.compile(r"did:key:z[1-9A-HJ-NP-Za-km-z]{47}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_UNIT = re.compile(r"[a-z][a-z0-9_]{0,31}")

_SCOPE = FindingKind.SCOPE_CREEP
_TRUST = FindingKind.IMPLICIT_TRUST_INHERITANCE
_REVOCABLE = FindingKind.NON_REVOCABLE_GRANT
_OPACITY = FindingKind.AUTHORITY_CHAIN_OPACITY


# --- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """A spending limit in integer minor units of one unit (``usd_micros``, ``tokens``, ``calls``)."""

    amount: int
    unit: str = "usd_micros"

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise TokenFormatError(
                f"budget amount must be an integer number of minor units, got {self.amount!r}"
            )
        if not 0 <= self.amount <= MAX_AMOUNT:
            raise TokenFormatError(f"budget amount {self.amount} is outside 0 .. 2**63-1")
        if not isinstance(self.unit, str) or not _UNIT.fullmatch(self.unit):
            raise TokenFormatError(f"budget unit {self.unit!r} must match [a-z][a-z0-9_]{{0,31}}")

    @classmethod
    def parse(cls, text: str) -> Budget:
        """``AMOUNT[:UNIT]``, e.g. ``500000`` or ``1000:calls``; without ``:UNIT``, ``usd_micros``.

        Raises ``TokenFormatError`` for signs, fractions, NaN, overflow, spaces anywhere, and a
        ``:`` with no unit after it (``500:``): a forgotten unit is refused, never defaulted.
        """
        amount, colon, unit = str(text).partition(":")
        if not re.fullmatch(r"[0-9]{1,19}", amount):
            raise TokenFormatError(
                f"budget {text!r}: the amount must be a whole, non-negative number of minor units (e.g. 500000:usd_micros)"
            )
        if colon and not unit:
            raise TokenFormatError(
                f"budget {text!r}: name the unit after ':' (e.g. {amount}:calls) or drop the ':'"
            )
        return cls(int(amount), unit if colon else "usd_micros")

    def to_dict(self) -> dict[str, Any]:
        return {"amount": self.amount, "unit": self.unit}

    def __str__(self) -> str:
        return f"{self.amount} {self.unit}"


@dataclass(frozen=True)
class Grant:
    """One signed link: ``issuer`` gives ``audience`` these capabilities, budget and lifetime."""

    issuer: str
    audience: str
    capabilities: tuple[Capability, ...]
    budget: Budget | None
    not_before: int
    expires: int
    max_depth: int
    """How many further delegation levels may follow this grant (0: none)."""
    nonce: str
    purpose: str
    parent: str | None
    """Hash (id) of the parent grant; ``None`` for a root grant."""
    payload: bytes
    """The exact signed bytes (canonical JSON)."""
    signature: bytes
    id: str
    """SHA-256 of ``payload``, hex: the grant's id and revocation id."""

    def to_dict(self) -> dict[str, Any]:
        """A readable form for ``grant inspect --json`` (not the signed bytes)."""
        return {
            "id": self.id,
            "issuer": self.issuer,
            "audience": self.audience,
            "capabilities": [format_capability(c) for c in self.capabilities],
            "budget": self.budget.to_dict() if self.budget else None,
            "not_before": self.not_before,
            "expires": self.expires,
            "max_depth": self.max_depth,
            "purpose": self.purpose,
            "parent": self.parent,
        }


@dataclass(frozen=True)
class Chain:
    """Root grant first, the caller's grant (the tip) last. ``token`` is its wire form.

    ``ids``, ``not_before``, ``expires`` and ``budgets`` are computed once, when the chain is built.
    """

    links: tuple[Grant, ...]
    token: str
    ids: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Grant ids, root first."""
    not_before: int = field(init=False, repr=False, compare=False)
    """The latest not-before of any link: the chain is valid from then on."""
    expires: int = field(init=False, repr=False, compare=False)
    """The earliest expiry of any link: the chain is dead from then on."""
    budgets: tuple[tuple[str, Budget], ...] = field(init=False, repr=False, compare=False)
    """(grant id, budget) of every link that has a budget, root first."""

    def __post_init__(self) -> None:
        links = self.links
        set_ = object.__setattr__
        set_(self, "ids", tuple([link.id for link in links]))
        set_(self, "not_before", max([link.not_before for link in links]))
        set_(self, "expires", min([link.expires for link in links]))
        set_(self, "budgets", tuple([(link.id, link.budget) for link in links if link.budget is not None]))

    @property
    def tip(self) -> Grant:
        return self.links[-1]

    @property
    def root(self) -> Grant:
        return self.links[0]

    @property
    def id(self) -> str:
        """The tip's grant id."""
        return self.links[-1].id

    @property
    def holder(self) -> str:
        """The only principal that may invoke with this chain: the tip's audience."""
        return self.links[-1].audience

    def __str__(self) -> str:
        return self.token


# --- encoding -------------------------------------------------------------------------------------


def _token_value(value: Any, where: str) -> Any:
    """Constraint values as they go into a token: integral floats become integers, others are refused."""
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise CapabilityError(
                f"{where}: {value!r} is not an integer; tokens carry integers only (use minor units)"
            )
        return int(value)
    if isinstance(value, list):
        return [_token_value(v, where) for v in value]
    return value


def _capability_payload(cap: Capability) -> dict[str, Any]:
    data = cap.to_dict()
    data["constraints"] = {
        name: {op: _token_value(v, f"{cap.resource} {name}") for op, v in spec.items()}
        for name, spec in data["constraints"].items()
    }
    return data


def _encode_chain(links: Sequence[Grant]) -> str:
    parts = [TOKEN_PREFIX]
    for link in links:
        parts += [b64url_encode(link.payload), b64url_encode(link.signature)]
    return ".".join(parts)


def _did(value: str | PublicKey | SigningKey, what: str) -> str:
    if isinstance(value, PublicKey | SigningKey):
        return value.did
    if not isinstance(value, str):  # a list is unhashable: no TypeError from the key cache
        raise TokenFormatError(f"{what}: a did:key string or a PublicKey, got {type(value).__name__}")
    try:
        _cached_key(value)
    except TokenFormatError as exc:
        raise TokenFormatError(f"{what}: {exc}") from None
    return value


def _now(now: float | None) -> int:
    """``now`` in whole Unix seconds (``None``: the clock). Raises ``InputError`` for what is not a
    finite number (NaN, an infinity, a string, a boolean), which ``int`` would refuse with a bare
    ``ValueError``/``OverflowError`` or take as a time."""
    if now is None:
        return int(time.time())
    if type(now) is int:
        return now
    if isinstance(now, bool) or not isinstance(now, numbers.Real) or not math.isfinite(now):
        raise InputError(f"now must be a finite number of Unix seconds, got {now!r}")
    return int(now)


def _signing_key(key: SigningKey, what: str) -> SigningKey:
    """``key`` if it is a ``SigningKey``; else ``InputError`` (a ``PublicKey`` cannot sign)."""
    if not isinstance(key, SigningKey):
        hint = "; a public key cannot sign: give the private key" if isinstance(key, PublicKey) else ""
        raise InputError(f"{what} must be a SigningKey, got {type(key).__name__}{hint}")
    return key


def _sign(
    key: SigningKey,
    *,
    audience: str,
    capabilities: Sequence[Capability],
    budget: Budget | None,
    not_before: int,
    expires: int,
    max_depth: int,
    purpose: str,
    parent: str | None,
) -> Grant:
    if not capabilities or len(capabilities) > MAX_CAPABILITIES:
        raise TokenFormatError(f"a grant names 1 to {MAX_CAPABILITIES} capabilities")
    if budget is not None and not isinstance(budget, Budget):
        raise TokenFormatError(
            f"budget must be a Budget (Budget(amount, unit) or Budget.parse), got {type(budget).__name__}"
        )
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 0 <= max_depth <= MAX_DEPTH:
        raise TokenFormatError(f"max depth must be an integer from 0 to {MAX_DEPTH}")
    if not isinstance(purpose, str) or len(purpose) > MAX_PURPOSE:
        raise TokenFormatError(f"purpose must be a string of at most {MAX_PURPOSE} characters")
    if not 0 <= not_before < expires < MAX_TIME:
        raise TokenFormatError("expiry must be after not-before (a grant without expiry is refused)")
    body: dict[str, Any] = {
        "v": VERSION,
        "iss": key.did,
        "aud": audience,
        "caps": [_capability_payload(c) for c in capabilities],
        "budget": budget.to_dict() if budget else None,
        "nbf": not_before,
        "exp": expires,
        "depth": max_depth,
        "nonce": os.urandom(16).hex(),
        "purpose": purpose,
        "parent": parent,
    }
    payload = canonical_json(body)
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise TokenFormatError(f"grant payload is {len(payload)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    return parse_grant(payload, key.sign(GRANT_CONTEXT + payload))


def parse_grant(payload: bytes, signature: bytes, where: str = "grant") -> Grant:
    """Parse one link's payload strictly (no signature check); raises ``TokenFormatError``."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise TokenFormatError(f"{where}: payload larger than {MAX_PAYLOAD_BYTES} bytes")
    if len(signature) != SIGNATURE_SIZE:
        raise TokenFormatError(
            f"{where}: an Ed25519 signature is {SIGNATURE_SIZE} bytes, got {len(signature)}"
        )
    return _grant_from_canonical(payload, signature) or _parse_grant_reference(payload, signature, where)


def _parse_grant_reference(payload: bytes, signature: bytes, where: str) -> Grant:
    """The reference steps of ``parse_grant`` (sizes already checked): they accept or name the problem."""
    obj = parse_canonical(payload, where)
    if obj.get("v") != VERSION or type(obj.get("v")) is not int:
        raise TokenFormatError(
            f"{where}: unsupported version {obj.get('v')!r} (this verifier reads v{VERSION})"
        )
    if obj.keys() != _REQUIRED:
        _check_extra_fields(obj, where)
    # Field types: exact types (a boolean is never an integer, a float was refused while parsing).
    issuer, audience, raw_caps, raw_budget = obj["iss"], obj["aud"], obj["caps"], obj["budget"]
    not_before, expires, depth = obj["nbf"], obj["exp"], obj["depth"]
    nonce, purpose, parent = obj["nonce"], obj["purpose"], obj["parent"]
    for name, value, kind in (
        ("iss", issuer, str),
        ("aud", audience, str),
        ("caps", raw_caps, list),
        ("nbf", not_before, int),
        ("exp", expires, int),
        ("depth", depth, int),
        ("nonce", nonce, str),
        ("purpose", purpose, str),
    ):
        if type(value) is not kind:
            raise TokenFormatError(f"{where}: field {name!r} has the wrong type")
    if raw_budget is not None and type(raw_budget) is not dict:
        raise TokenFormatError(f"{where}: field 'budget' has the wrong type")
    if parent is not None and type(parent) is not str:
        raise TokenFormatError(f"{where}: field 'parent' has the wrong type")
    # The form is checked here; the key inside is decoded strictly when a signature is verified
    # (every issuer, and the invocation signer that must equal the tip's audience).
    if not _DID_FORMAT.fullmatch(issuer) or not _DID_FORMAT.fullmatch(audience):
        raise TokenFormatError(f"{where}: iss and aud must be Ed25519 did:key identifiers")
    if not raw_caps or len(raw_caps) > MAX_CAPABILITIES:
        raise TokenFormatError(f"{where}: caps must hold 1 to {MAX_CAPABILITIES} capabilities")
    caps: list[Capability] = []
    for i, raw in enumerate(raw_caps):
        try:
            cap = Capability.from_dict(raw)
        except CapabilityError as exc:
            raise TokenFormatError(f"{where} caps[{i}]: {exc}") from None
        # The payload holds no float (parse_canonical), so the token form is ``to_dict`` itself.
        if cap.to_dict() != raw:
            raise TokenFormatError(f"{where} caps[{i}]: capability is not in canonical form")
        caps.append(cap)
    budget = None
    if raw_budget is not None:
        if raw_budget.keys() != _BUDGET_FIELDS:
            raise TokenFormatError(f"{where}: budget has exactly the fields amount and unit")
        budget = Budget(raw_budget["amount"], raw_budget["unit"])
    if not 0 <= not_before < expires < MAX_TIME:
        raise TokenFormatError(f"{where}: need 0 <= nbf < exp < 2**40")
    if not 0 <= depth <= MAX_DEPTH:
        raise TokenFormatError(f"{where}: depth must be 0 to {MAX_DEPTH}")
    if not _HEX32.fullmatch(nonce):
        raise TokenFormatError(f"{where}: nonce must be 32 lower-case hex digits")
    if len(purpose) > MAX_PURPOSE:
        raise TokenFormatError(f"{where}: purpose longer than {MAX_PURPOSE} characters")
    if parent is not None and not _HEX64.fullmatch(parent):
        raise TokenFormatError(f"{where}: parent must be 64 lower-case hex digits or null")
    return Grant(
        issuer=issuer,
        audience=audience,
        capabilities=tuple(caps),
        budget=budget,
        not_before=not_before,
        expires=expires,
        max_depth=depth,
        nonce=nonce,
        purpose=purpose,
        parent=parent,
        payload=payload,
        signature=signature,
        id=sha256_hex(payload),
    )


def _grant_from_canonical(payload: bytes, signature: bytes) -> Grant | None:
    """``parse_grant`` for the common shape, or ``None`` when the reference steps must decide.

    Accepts only payloads that the reference steps accept, and returns an equal ``Grant``: orjson
    parses, the sorted re-encoding must be byte-for-byte ``payload`` (as in ``parse_canonical``),
    there is no ``ext``/``crit``, and every value has its exact type and range, checked here in
    one pass. Every scalar is type-checked to a string, an integer or null, so no float can hide
    anywhere (the reference path refuses floats). Capabilities are built by
    ``capability_from_canonical``, which is exact for the canonical string/integer shapes. Any
    doubt (a boolean constraint value, an extension, a bad field) returns ``None``, and the
    reference steps accept or name the problem as before. Never raises.
    """
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or obj.keys() != _REQUIRED:
        return None
    try:
        if orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) != payload:
            return None
    except TypeError:  # pragma: no cover - orjson refuses to write what it parsed; the reference decides
        return None
    version, issuer, audience, raw_caps, raw_budget = (
        obj["v"],
        obj["iss"],
        obj["aud"],
        obj["caps"],
        obj["budget"],
    )
    not_before, expires, depth = obj["nbf"], obj["exp"], obj["depth"]
    nonce, purpose, parent = obj["nonce"], obj["purpose"], obj["parent"]
    if (
        type(version) is not int
        or version != VERSION
        or type(issuer) is not str
        or type(audience) is not str
        or type(raw_caps) is not list
        or type(not_before) is not int
        or type(expires) is not int
        or type(depth) is not int
        or type(nonce) is not str
        or type(purpose) is not str
        or not 0 <= not_before < expires < MAX_TIME
        or not 0 <= depth <= MAX_DEPTH
        or not 0 < len(raw_caps) <= MAX_CAPABILITIES
        or len(purpose) > MAX_PURPOSE
        or not _DID_FORMAT.fullmatch(issuer)
        or not _DID_FORMAT.fullmatch(audience)
        or not _HEX32.fullmatch(nonce)
    ):
        return None
    if parent is not None and (type(parent) is not str or not _HEX64.fullmatch(parent)):
        return None
    budget = None
    if raw_budget is not None:
        if type(raw_budget) is not dict or raw_budget.keys() != _BUDGET_FIELDS:
            return None
        amount, unit = raw_budget["amount"], raw_budget["unit"]
        if type(amount) is not int or not 0 <= amount <= MAX_AMOUNT:
            return None
        if type(unit) is not str or not _UNIT.fullmatch(unit):
            return None
        budget = _prechecked(Budget, amount=amount, unit=unit)  # checked above as Budget checks
    caps: list[Capability] = []
    for raw in raw_caps:
        cap = capability_from_canonical(raw)
        if cap is None:
            return None
        caps.append(cap)
    return _prechecked(
        Grant,
        issuer=issuer,
        audience=audience,
        capabilities=tuple(caps),
        budget=budget,
        not_before=not_before,
        expires=expires,
        max_depth=depth,
        nonce=nonce,
        purpose=purpose,
        parent=parent,
        payload=payload,
        signature=signature,
        id=hashlib.sha256(payload).hexdigest(),
    )


def _check_extra_fields(obj: dict[str, Any], where: str) -> None:
    """All required fields, and beside them only ``ext`` (an object); raise ``TokenFormatError`` otherwise."""
    unknown = obj.keys() - _REQUIRED - _OPTIONAL
    if unknown:
        raise TokenFormatError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))}; every top-level field is critical "
            "(algorithm and key fields are never accepted)"
        )
    if "crit" in obj:
        crit = obj["crit"]
        names = ", ".join(map(str, crit)) if isinstance(crit, list) else repr(crit)
        raise TokenFormatError(f"{where}: unknown critical extension(s): {names}")
    if "ext" in obj and not isinstance(obj["ext"], dict):
        raise TokenFormatError(f"{where}: ext must be an object")
    for name in _FIELD_ORDER:
        if name not in obj:
            raise TokenFormatError(f"{where}: missing field {name!r}")


def parse_chain(token: str) -> Chain:
    """Parse a chain's wire form strictly, checking sizes before decoding anything.

    Checks no signature. Raises ``TokenFormatError`` for anything not exactly in the format.
    """
    if not isinstance(token, str):
        raise TokenFormatError("a token is a string")
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenFormatError(f"token is {len(token)} bytes; the limit is {MAX_TOKEN_BYTES}")
    if not token.isascii():
        raise TokenFormatError("token contains non-ASCII characters")
    parts = token.split(".", 2 * MAX_LINKS + 1)
    if parts[0] != TOKEN_PREFIX:
        # Quoted only when it looks like a version: what callers send by mistake is often a
        # secret (a provider's API key as the bearer token), and this text reaches the audit log.
        if _VERSION_FORMAT.fullmatch(parts[0]):
            raise TokenFormatError(
                f"unknown token version {parts[0]!r}; this verifier reads {TOKEN_PREFIX!r} tokens only"
            )
        raise TokenFormatError(f"not an agentgate token: it does not start with {TOKEN_PREFIX!r}")
    rest = parts[1:]
    if len(rest) > 2 * MAX_LINKS:
        raise TokenFormatError(f"chain longer than {MAX_LINKS} links")
    if not rest or len(rest) % 2:
        raise TokenFormatError("token must be ag1 followed by payload.signature pairs (a link is unsigned)")
    links = []
    decoded = b64url_decode_parts(token[len(TOKEN_PREFIX) + 1 :])
    if decoded is None:  # some part is not strict base64url: decode one by one to name it
        for i in range(0, len(rest), 2):
            where = f"link {i // 2}"
            links.append(
                parse_grant(
                    b64url_decode(rest[i], where), b64url_decode(rest[i + 1], f"{where} signature"), where
                )
            )
        return Chain(tuple(links), token)
    for i in range(0, len(decoded), 2):
        links.append(parse_grant(decoded[i], decoded[i + 1], f"link {i // 2}"))
    return Chain(tuple(links), token)


# --- checks ---------------------------------------------------------------------------------------

_KEY_CACHE: dict[str, bytes] = {}


def _cached_key(did: str) -> bytes:
    """The 32-byte key decoded from ``did``, once per string (a bounded cache: the key is a pure
    function of the string, so a cached one is exactly what decoding it again gives). Raises
    ``TokenFormatError`` for a string that is not an Ed25519 did:key."""
    key = _KEY_CACHE.get(did)
    if key is None:
        if len(_KEY_CACHE) >= 4096:
            _KEY_CACHE.clear()
        key = _KEY_CACHE[did] = did_public_key(did)
    return key


def verify_signature(did: str, message: bytes, signature: bytes, key: bytes | None = None) -> None:
    """Raise ``InvalidSignature`` unless ``signature`` is the Ed25519 signature of ``message`` by ``did``.

    ``key``, when given, is the key already decoded from ``did`` (a configured trust anchor's).
    Otherwise keys are decoded from the did once (a bounded cache: the key is a pure function of
    the string). libsodium's ``crypto_sign_open`` refuses non-canonical S and small-order keys;
    the length is checked here first.
    """
    if key is None:
        try:
            key = _cached_key(did)
        except TokenFormatError as exc:
            raise InvalidSignature(f"{did[:80]!r} is not a usable Ed25519 key") from exc
    if len(signature) != SIGNATURE_SIZE:
        raise InvalidSignature(f"an Ed25519 signature is {SIGNATURE_SIZE} bytes, got {len(signature)}")
    if not _sign_open(signature + message, key):
        raise InvalidSignature(f"signature does not verify under {did}")


def _bindings_open(signed: bytes, key: bytes) -> bool:
    try:
        nacl.bindings.crypto_sign_open(signed, key)
    except nacl.exceptions.CryptoError:
        return False
    return True


def _load_sign_open() -> Callable[[bytes, bytes], bool]:
    """Whether ``signed`` (signature then message) verifies under the 32-byte Ed25519 ``key``.

    libsodium's ``crypto_sign_open`` (the same function ``nacl.bindings.crypto_sign_open``
    wraps), called through PyNaCl's own cffi module with NULL for both outputs, which libsodium
    allows: no message buffer is allocated and nothing is copied back, saving a few microseconds
    per signature. Where that module is not importable, the PyNaCl binding is used.
    """
    try:
        sodium: Any = importlib.import_module("nacl._sodium")
        sign_open, null = sodium.lib.crypto_sign_open, sodium.ffi.NULL
    except (ImportError, AttributeError):  # pragma: no cover - PyNaCl without its cffi module
        return _bindings_open

    def open_signed(signed: bytes, key: bytes) -> bool:
        return bool(sign_open(null, null, signed, len(signed), key) == 0)

    return open_signed


_sign_open = _load_sign_open()


def _finding(
    kind: FindingKind, code: str, message: str, grant: Grant | None, field: str | None = None
) -> Finding:
    return Finding(kind=kind, code=code, message=message, grant=grant.id if grant else None, field=field)


def _short(did: str) -> str:
    if not isinstance(did, str):  # a hand-built invocation's issuer: named, never a TypeError
        return repr(did)[:40]
    return did if len(did) <= 24 else did[:16] + "..." + did[-6:]


def _capability_finding(parent: Grant, child: Grant, cap: Capability) -> Finding | None:
    # ``attenuates`` is exact and agrees with ``witness`` (property-tested), without building
    # witness calls: the common case of a valid link costs no more than that.
    for p in parent.capabilities:
        if attenuates(p, cap):
            return None
    near: tuple[Capability, Any] | None = None
    for p in parent.capabilities:
        call = witness(p, cap)
        if call is None:
            return None
        if near is None and pattern_within(cap.resource, p.resource) and p.action in ("*", cap.action):
            near = (p, call)
    if near is not None:
        p, call = near
        for name, constraint in p.constraints:
            if name not in call.args or not constraint.allows(call.args[name]):
                value = call.args.get(name, "<any value>")
                return _finding(
                    _SCOPE,
                    "constraint_widened",
                    f"child capability {format_capability(cap)} allows {name}={value!r}, which the parent's "
                    f"{format_capability(p)} does not; narrow {name} to within the parent's constraint",
                    child,
                    f"constraints.{name}",
                )
    call = witness(parent.capabilities[0], cap)
    assert call is not None
    held = ", ".join(format_capability(p) for p in parent.capabilities)
    return _finding(
        _SCOPE,
        "capability_widened",
        f"child capability {format_capability(cap)} allows {call.resource} {call.action}, which no parent "
        f"capability covers (parent holds {held})",
        child,
        "capabilities",
    )


def link_findings(links: Sequence[Grant], child: Grant) -> list[Finding]:
    """Everything that stops ``child`` from attenuating the chain ``links`` (signatures aside)."""
    parent = links[-1]
    out: list[Finding] = []
    if child.parent != parent.id:
        out.append(
            _finding(
                _OPACITY,
                "parent_mismatch",
                "link does not name the previous link as its parent "
                "(links reordered, spliced from another chain, or one dropped)",
                child,
                "parent",
            )
        )
        return out
    if child.issuer != parent.audience:
        out.append(
            _finding(
                _OPACITY,
                "issuer_not_parent_audience",
                f"link is signed by {_short(child.issuer)}, but "
                f"the parent grant was given to {_short(parent.audience)}",
                child,
                "issuer",
            )
        )
        return out
    if child.audience == child.issuer:
        out.append(
            _finding(
                _TRUST,
                "self_delegation",
                "a principal delegated to itself; delegate to the sub-agent's own key instead",
                child,
                "audience",
            )
        )
    elif child.audience in {link.issuer for link in links} | {link.audience for link in links}:
        out.append(
            _finding(
                _TRUST,
                "delegation_cycle",
                f"{_short(child.audience)} already appears in this chain; "
                "authority may not flow back to an earlier holder",
                child,
                "audience",
            )
        )
    if parent.max_depth == 0:
        out.append(
            _finding(
                _SCOPE,
                "delegation_not_allowed",
                "the parent grant allows no further delegation (max depth 0)",
                child,
                "max_depth",
            )
        )
    elif child.max_depth > parent.max_depth - 1:
        out.append(
            _finding(
                _SCOPE,
                "depth_widened",
                f"child allows {child.max_depth} further delegation levels; "
                f"the parent leaves at most {parent.max_depth - 1}",
                child,
                "max_depth",
            )
        )
    for cap in child.capabilities:
        found = _capability_finding(parent, child, cap)
        if found is not None:
            out.append(found)
    if parent.budget is not None:
        if child.budget is None:
            out.append(
                _finding(
                    _SCOPE,
                    "budget_widened",
                    f"child has no budget limit; the parent is limited to {parent.budget}",
                    child,
                    "budget",
                )
            )
        elif child.budget.unit != parent.budget.unit:
            out.append(
                _finding(
                    _SCOPE,
                    "budget_unit_changed",
                    f"child budget is in {child.budget.unit}, the parent's in {parent.budget.unit}",
                    child,
                    "budget",
                )
            )
        elif child.budget.amount > parent.budget.amount:
            out.append(
                _finding(
                    _SCOPE,
                    "budget_widened",
                    f"child budget {child.budget} exceeds the parent's {parent.budget}",
                    child,
                    "budget",
                )
            )
    if child.expires > parent.expires:
        out.append(
            _finding(
                _REVOCABLE,
                "outlives_parent",
                f"child expires at {when(child.expires)}, after its parent "
                f"({when(parent.expires)}); a child never outlives its parent",
                child,
                "expiry",
            )
        )
    if child.not_before < parent.not_before:
        out.append(
            _finding(
                _SCOPE,
                "starts_before_parent",
                "child becomes valid before its parent does",
                child,
                "not_before",
            )
        )
    return out


def root_findings(root: Grant) -> list[Finding]:
    """What stops ``root`` from starting a chain (trust anchors aside): it names a parent."""
    if root.parent is None:
        return []
    return [
        _finding(
            _OPACITY,
            "root_has_parent",
            "the first link names a parent: the chain's start was dropped, or its links reordered",
            root,
            "parent",
        )
    ]


def chain_finding(chain: Chain, anchors: frozenset[str]) -> Finding | None:
    """The first reason ``chain`` is not a valid, attenuating chain from one of ``anchors``; else ``None``.

    Time-independent (signatures, links, attenuation), so the result may be cached by token.
    """
    root = chain.root
    if started := root_findings(root):
        return started[0]
    if root.issuer not in anchors:
        return _finding(
            _OPACITY,
            "untrusted_root",
            f"root grant issued by {_short(root.issuer)}, which is not a trust anchor of this verifier",
            root,
            "issuer",
        )
    root_key = anchors.public_keys.get(root.issuer) if isinstance(anchors, TrustAnchors) else None
    for i, link in enumerate(chain.links):
        try:
            verify_signature(
                link.issuer, GRANT_CONTEXT + link.payload, link.signature, root_key if i == 0 else None
            )
        except InvalidSignature:
            return _finding(
                _OPACITY,
                "bad_signature",
                f"link {i} is not validly signed by its issuer {_short(link.issuer)}",
                link,
                "signature",
            )
        if i:
            found = link_findings(chain.links[:i], link)
            if found:
                return found[0]
    return None


def time_finding(chain: Chain, now: int, skew: int = DEFAULT_SKEW) -> Finding | None:
    """Whether every link is valid at ``now`` (not-before with ``skew`` tolerance; expiry exact)."""
    for link in chain.links:
        if now >= link.expires:
            return _finding(
                _SCOPE,
                "grant_expired",
                f"grant expired at {when(link.expires)} (now {when(now)}); ask its issuer for a new one",
                link,
                "expiry",
            )
        if now + skew < link.not_before:
            return _finding(
                _SCOPE,
                "grant_not_yet_valid",
                f"grant is valid from {when(link.not_before)} (now {when(now)}, tolerance {skew}s)",
                link,
                "not_before",
            )
    return None


def error_for(finding: Finding) -> AuthorityError:
    """The exception from ``agentgate.errors`` that enforces ``finding`` (with it attached)."""
    cls: type[AuthorityError]
    if finding.code in (
        "grant_expired",
        "grant_not_yet_valid",
        "invocation_expired",
        "invocation_not_yet_valid",
    ):
        cls = Expired
    elif finding.code in ("revoked",):
        cls = Revoked
    elif finding.code in ("bad_signature", "bad_invocation_signature"):
        cls = InvalidSignature
    elif finding.kind == _SCOPE or finding.code == "outlives_parent":
        cls = ScopeCreep
    else:
        cls = Denied
    error = cls(f"{finding.code}: {finding.message}")
    error.finding = finding
    return error


class TrustAnchors(frozenset[str]):
    """A verifier's trust anchors (root did:keys), with each key decoded once, when configured.

    A set of did strings like any other (chain caches key on it); ``public_keys`` spares
    verification the decoding of the root issuer's did, as a verifier configured with raw keys
    would. Configuration, not a cache: it never holds anything the verifier was not given.
    """

    public_keys: dict[str, bytes]

    def __new__(cls, public_keys: dict[str, bytes]) -> TrustAnchors:
        anchors = super().__new__(cls, public_keys)
        anchors.public_keys = public_keys
        return anchors


def _not_an_anchor(value: object) -> str:
    if isinstance(value, SigningKey):
        return "trust anchor: a private key (SigningKey); a verifier trusts its public key (key.public)"
    return f"trust anchors are public keys or did:key strings (one, or a list), got {type(value).__name__}"


def _anchors(trusted: PublicKey | str | Iterable[PublicKey | str]) -> TrustAnchors:
    """The trust anchors, each did checked strictly; raises ``TokenFormatError`` naming a bad one,
    and for what is neither an anchor nor a collection of them (``None``; a lone ``SigningKey``,
    which is not iterable: a verifier is configured with public keys, though a list's members
    may be signing keys, whose public halves are taken)."""
    items: Iterable[PublicKey | str]
    if isinstance(trusted, PublicKey | str):
        items = [trusted]
    elif isinstance(trusted, Iterable) and not isinstance(trusted, bytes | bytearray | SigningKey):
        items = trusted
    else:
        raise TokenFormatError(_not_an_anchor(trusted))
    public_keys: dict[str, bytes] = {}
    for item in items:
        if isinstance(item, PublicKey | SigningKey):
            key = item if isinstance(item, PublicKey) else item.public
            public_keys[key.did] = key.raw
            continue
        try:
            public_keys[item] = did_public_key(item)
        except TokenFormatError as exc:
            raise TokenFormatError(f"trust anchor: {exc}") from None
    return TrustAnchors(public_keys)


# --- the public operations ------------------------------------------------------------------------


def _as_chain(chain: Chain | str) -> Chain:
    return chain if isinstance(chain, Chain) else parse_chain(chain)


def _caps(capabilities: Iterable[Capability | str]) -> list[Capability]:
    if isinstance(capabilities, str | Capability) or not isinstance(capabilities, Iterable):
        # One string would be read character by character, as capability 't'.
        raise CapabilityError(f"capabilities are a list of capabilities, got {type(capabilities).__name__}")
    return [c if isinstance(c, Capability) else Capability.parse(c) for c in capabilities]


def issue(
    issuer: SigningKey,
    audience: str | PublicKey,
    capabilities: Iterable[Capability | str],
    *,
    ttl: int,
    budget: Budget | None = None,
    max_depth: int = 2,
    purpose: str = "",
    now: float | None = None,
) -> Chain:
    """A root grant from ``issuer`` (a trust anchor) to ``audience``, valid from now for ``ttl`` seconds.

    Raises ``TokenFormatError`` or ``CapabilityError`` for values that cannot go into a token
    (non-positive ttl, non-integer constraint numbers, too many capabilities...).
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise TokenFormatError("ttl must be a positive whole number of seconds (expiry is required)")
    start = _now(now)
    grant = _sign(
        _signing_key(issuer, "the issuer"),
        audience=_did(audience, "audience"),
        capabilities=_caps(capabilities),
        budget=budget,
        not_before=start,
        expires=start + ttl,
        max_depth=max_depth,
        purpose=purpose,
        parent=None,
    )
    return Chain((grant,), _encode_chain([grant]))


def delegate(
    parent: Chain | str,
    holder: SigningKey,
    audience: str | PublicKey,
    capabilities: Iterable[Capability | str],
    *,
    ttl: int,
    budget: Budget | None = None,
    max_depth: int | None = None,
    purpose: str = "",
    now: float | None = None,
) -> Chain:
    """Extend ``parent`` with a narrower grant from its holder to ``audience``.

    ``budget=None`` keeps the parent's budget; ``max_depth=None`` takes one less than the parent's.
    Refuses (raising with the finding attached) anything that does not attenuate: ``ScopeCreep``
    for wider capabilities, constraints, budget, depth or a later expiry, ``Denied`` when
    ``holder`` is not the parent's audience or the delegation would cycle, ``Expired`` when the
    parent is no longer valid (expired, or starting more than ``DEFAULT_SKEW`` seconds from now).
    """
    chain = _as_chain(parent)
    tip = chain.tip
    if _signing_key(holder, "the holder").did != tip.audience:
        raise error_for(
            _finding(
                _TRUST,
                "not_the_audience",
                f"{_short(holder.did)} cannot delegate a grant given to {_short(tip.audience)}",
                tip,
                "audience",
            )
        )
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise TokenFormatError("ttl must be a positive whole number of seconds (expiry is required)")
    start = _now(now)
    # Not-before with the verifiers' tolerance: a grant issued on a host whose clock runs a few
    # seconds ahead is usable here at once (decisions allow DEFAULT_SKEW), so it is delegable at
    # once too; the child starts no earlier than its parent (``not_before`` below). Expiry is exact.
    found = time_finding(chain, start, DEFAULT_SKEW)
    if found is not None:
        raise error_for(found)
    if tip.max_depth == 0:
        raise error_for(
            _finding(
                _SCOPE,
                "delegation_not_allowed",
                "the parent grant allows no further delegation (max depth 0)",
                tip,
                "max_depth",
            )
        )
    if start + ttl <= tip.not_before:  # only within the tolerance above: a parent starting soon
        raise TokenFormatError(
            f"a ttl of {ttl}s from now ({when(start)}) ends before the parent grant starts "
            f"({when(tip.not_before)}); give a longer ttl"
        )
    grant = _sign(
        holder,
        audience=_did(audience, "audience"),
        capabilities=_caps(capabilities),
        budget=tip.budget if budget is None else budget,
        not_before=max(start, tip.not_before),
        expires=start + ttl,
        max_depth=tip.max_depth - 1 if max_depth is None else max_depth,
        purpose=purpose,
        parent=tip.id,
    )
    found_all = link_findings(chain.links, grant)
    if found_all:
        raise error_for(found_all[0])
    links = (*chain.links, grant)
    return Chain(links, _encode_chain(links))


def verify_chain(
    chain: Chain | str,
    trusted: PublicKey | str | Iterable[PublicKey | str],
    *,
    now: float | None = None,
    skew: int = DEFAULT_SKEW,
) -> Chain:
    """Parse and fully verify a chain against the trust anchors at time ``now``; return it.

    Checks sizes, format, every signature, every link's parent hash and issuer, attenuation and
    validity times; not revocation (that needs the store: use ``decide``). Raises
    ``TokenFormatError`` for malformed bytes, else the ``AuthorityError`` of the first finding.
    """
    if type(skew) is not int or skew < 0:
        raise InputError(f"skew must be a whole number of seconds, 0 or more, got {skew!r:.40}")
    parsed = _as_chain(chain)
    found = chain_finding(parsed, _anchors(trusted)) or time_finding(parsed, _now(now), skew)
    if found is not None:
        raise error_for(found)
    return parsed


def findings_of(error: AgentGateError) -> list[Finding]:
    """The finding an authority error carries, or an opacity finding for malformed input."""
    if isinstance(error, AuthorityError) and isinstance(error.finding, Finding):
        return [error.finding]
    return [Finding(kind=_OPACITY, code="malformed_token", message=str(error))]
