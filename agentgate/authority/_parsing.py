"""Parsing a chain's wire form strictly: sizes are checked before anything is decoded.

No signature is checked here. ``parse_grant`` takes a one-pass path for the common canonical
shape and falls back to the reference steps, which accept or name the problem; the fast path
accepts only what they accept, and returns an equal ``Grant``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from agentgate.authority._encoding import (
    DIGEST_HEX,
    NONCE_HEX,
    b64url_decode,
    b64url_decode_parts,
    parse_canonical,
    read_sorted_object,
    sha256_hex,
)
from agentgate.authority._grant import (
    _UNIT,
    MAX_AMOUNT,
    MAX_CAPABILITIES,
    MAX_DEPTH,
    MAX_LINKS,
    MAX_PAYLOAD_BYTES,
    MAX_PURPOSE,
    MAX_TIME,
    MAX_TOKEN_BYTES,
    TOKEN_PREFIX,
    VERSION,
    Budget,
    Chain,
    Grant,
)
from agentgate.capabilities import Capability
from agentgate.capabilities._canonical import _prechecked, capability_from_canonical
from agentgate.errors import CapabilityError, TokenFormatError
from agentgate.keys import SIGNATURE_SIZE

_VERSION_FORMAT = re.compile(r"ag[0-9]{1,3}")
"""What a token version looks like (quoted in errors; other prefixes may be secrets)."""

_REQUIRED = frozenset(
    {"v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce", "purpose", "parent"}
)
_OPTIONAL = frozenset({"ext", "crit"})
_BUDGET_FIELDS = frozenset({"amount", "unit"})
_FIELD_ORDER = ("v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce", "purpose", "parent")
_DID_FORMAT = re.compile(r"did:key:z[1-9A-HJ-NP-Za-km-z]{47}")


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
            raise TokenFormatError(f"{where} caps[{i}]: {_not_canonical(cap, raw)}")
        caps.append(cap)
    budget = None
    if raw_budget is not None:
        if raw_budget.keys() != _BUDGET_FIELDS:
            raise TokenFormatError(f"{where}: budget has exactly the fields amount and unit")
        try:
            budget = Budget(raw_budget["amount"], raw_budget["unit"])
        except TokenFormatError as exc:
            raise TokenFormatError(f"{where}: {exc}") from None
    if not 0 <= not_before < expires < MAX_TIME:
        raise TokenFormatError(f"{where}: need 0 <= nbf < exp < 2**40")
    if not 0 <= depth <= MAX_DEPTH:
        raise TokenFormatError(f"{where}: depth must be 0 to {MAX_DEPTH}")
    if not NONCE_HEX.fullmatch(nonce):
        raise TokenFormatError(f"{where}: nonce must be 32 lower-case hex digits")
    if len(purpose) > MAX_PURPOSE:
        raise TokenFormatError(f"{where}: purpose longer than {MAX_PURPOSE} characters")
    if parent is not None and not DIGEST_HEX.fullmatch(parent):
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


def _not_canonical(cap: Capability, raw: dict[str, Any]) -> str:
    """What of ``raw``, read as ``cap``, differs from ``cap``'s canonical form (``to_dict``): the
    ``constraints`` field left out, or a constraint spelled otherwise (an ``in`` repeating a value,
    or of one value, which is written ``eq``), named with the spelling the format requires. Until
    review R68 the refusal said only "capability is not in canonical form"."""
    if "constraints" not in raw:
        return "the field 'constraints' is missing ({} for none); a capability has exactly resource, action, constraints"
    for name, spec in cap.to_dict()["constraints"].items():
        given = raw["constraints"].get(name)
        if given != spec:
            return (
                f"constraints.{name} is written {_json_text(given)}; its canonical form is {_json_text(spec)} "
                "(an 'in' holds two or more values, each once; one value is written 'eq')"
            )
    return "capability is not in canonical form"  # pragma: no cover - every difference is named above


def _json_text(value: object) -> str:
    """``value`` as canonical JSON text, cut at 80 characters (an ``in`` may hold 1,000 values)."""
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= 80 else text[:80] + "..."


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
    obj = read_sorted_object(payload)
    if obj is None or obj.keys() != _REQUIRED:
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
        or not NONCE_HEX.fullmatch(nonce)
    ):
        return None
    if parent is not None and (type(parent) is not str or not DIGEST_HEX.fullmatch(parent)):
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
        # As written when it names nothing: ``[]`` and ``[""]`` were ``unknown critical
        # extension(s): `` until review R82.
        names = ", ".join(map(str, crit)) if isinstance(crit, list) and any(crit) else repr(crit)
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
        raise TokenFormatError(f"not an agentgate token: it does not start with '{TOKEN_PREFIX}.'")
    rest = parts[1:]
    if len(rest) > 2 * MAX_LINKS:
        raise TokenFormatError(f"chain longer than {MAX_LINKS} links")
    if not rest:
        raise TokenFormatError(
            f"token holds no link: {TOKEN_PREFIX} must be followed by payload.signature pairs"
        )
    if len(rest) % 2:
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
