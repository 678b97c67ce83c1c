"""The public operations: ``issue`` and ``delegate`` sign grants, ``verify_chain`` checks a chain.

Each checks its arguments before anything is signed (``_did``, ``_now`` and ``_signing_key`` are
shared with invocations); ``delegate`` refuses, with the finding attached, a grant that would
not attenuate its parent.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from agentgate._shown import quoted
from agentgate._time import when
from agentgate.authority._chain_findings import (
    _OPACITY,
    _SCOPE,
    _TRUST,
    EDITED_CHAIN_FIX,
    NO_FURTHER_DELEGATION,
    _finding,
    _short,
    chain_finding,
    error_for,
    first_link_finding,
    time_finding,
    unsound_finding,
)
from agentgate.authority._encoding import canonical_json
from agentgate.authority._grant import (
    DEFAULT_SKEW,
    GRANT_CONTEXT,
    MAX_CAPABILITIES,
    MAX_DEPTH,
    MAX_PAYLOAD_BYTES,
    MAX_PURPOSE,
    MAX_SKEW,
    MAX_TIME,
    MAX_TOKEN_BYTES,
    SIGNATURE_TEXT_BYTES,
    VERSION,
    Budget,
    Chain,
    Grant,
    _encode_chain,
)
from agentgate.authority._parsing import parse_chain, parse_grant
from agentgate.authority._signatures import _anchors, _cached_key
from agentgate.capabilities import Capability, token_number_refusal
from agentgate.errors import CapabilityError, InputError, TokenFormatError
from agentgate.keys import PublicKey, SigningKey


def _token_value(value: Any, where: str) -> Any:
    """Constraint values as they go into a token: whole floats within range become integers,
    others are refused (``token_number_refusal``), named as written: until review R83 a whole
    one out of range (``le: 1.0e+19`` in a role's rule) became the integer it is, and was
    refused as ``integer 10000000000000000000 is out of range``, a number never written."""
    if isinstance(value, float):
        why = token_number_refusal(value)
        if why is not None:
            raise CapabilityError(f"{where}: {why}")
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
    if isinstance(now, bool) or not isinstance(now, numbers.Real) or not _finite_real(now):
        raise InputError(f"now must be a finite number of Unix seconds, got {quoted(now)}")
    return int(now)


def _finite_real(value: numbers.Real) -> bool:
    """Whether ``value`` is finite: a ``Fraction`` too large for a float (``Fraction(10**5000)``)
    is, where ``math.isfinite`` raised ``OverflowError`` converting it (until a second regression
    review of R85)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return True


def _skew(skew: object) -> int:
    """``skew`` (seconds of clock tolerance on not-before and invocation times) if it is a whole
    number of seconds from 0 to ``MAX_SKEW``; else ``InputError``. A NaN compares false with every
    time, so it let a grant not yet valid and an invocation dated hours ahead through; a string or
    ``None`` raised a ``TypeError`` from the first decision instead of at configuration."""
    if type(skew) is not int or not 0 <= skew <= MAX_SKEW:
        raise InputError(f"skew must be a whole number of seconds, 0 to {MAX_SKEW}, got {quoted(skew, 40)}")
    return skew


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
    chain_bytes: int = 0,
) -> Grant:
    """The grant, signed; ``chain_bytes`` is the length of the parent chain's token (0 for a root).

    Raises ``TokenFormatError`` before signing for what no verifier would read: a payload over
    ``MAX_PAYLOAD_BYTES``, or a chain whose token with this link would exceed ``MAX_TOKEN_BYTES``.
    """
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
    if not 0 <= not_before < MAX_TIME or not 0 <= expires < MAX_TIME:
        raise TokenFormatError(
            f"grant times lie in 0 .. 2**40-1 Unix seconds; not-before {quoted(not_before)}, expiry {quoted(expires)} "
            "(a clock or now= before 1970, or a ttl reaching past 2**40)"
        )
    if not not_before < expires:
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
    if chain_bytes:
        # ".payload.signature" appended to the parent's token, both unpadded base64url.
        total = chain_bytes + 1 + (4 * len(payload) + 2) // 3 + 1 + SIGNATURE_TEXT_BYTES
        if total > MAX_TOKEN_BYTES:
            raise TokenFormatError(
                f"the delegated chain's token would be {total} bytes; the limit is {MAX_TOKEN_BYTES}, "
                "so no verifier would read it: delegate fewer or narrower capabilities, or from a "
                "shorter chain"
            )
    return parse_grant(payload, key.sign(GRANT_CONTEXT + payload))


def _as_chain(chain: Chain | str) -> Chain:
    return chain if isinstance(chain, Chain) else parse_chain(chain)


def _signed_chain(chain: Chain | str) -> Chain:
    """``chain`` as its token says it is: a token parsed, or a ``Chain`` object checked against
    its own token. Raises ``Denied`` (``tip_mismatch``, as a decision refuses it) for an object
    whose links are not the ones its token carries (fields edited, ``dataclasses.replace``, a
    ``Chain`` built by hand), and ``TokenFormatError`` for a token that does not parse. For what
    trusts the links' fields: ``verify_chain``, ``delegate``, ``record``. Until review R53 they read
    an object's fields as given: an edited expiry verified after the signed grant expired, widened
    capabilities were delegated, an edited audience was recorded (``revoke_holder`` reads it).

    The token of a ``Chain`` object is parsed once: the parsed copy is kept on the object
    (``Chain._parsed``) and later calls compare the fields with it (a few microseconds, where a
    parse took 20-65), as long as the object still carries the token that copy was parsed from."""
    if not isinstance(chain, Chain):
        return parse_chain(chain)
    signed = chain._parsed
    if signed is None or signed.token != chain.token:
        signed = parse_chain(chain.token)
    if signed != chain:
        raise error_for(
            _finding(
                _OPACITY,
                "tip_mismatch",
                f"the chain's links are not the ones its token carries; {EDITED_CHAIN_FIX}",
                signed.tip,
                "tip",
            )
        )
    if chain._parsed is not signed:
        object.__setattr__(chain, "_parsed", signed)  # frozen: a cache, not a field that compares
    return signed


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
    chain = _signed_chain(parent)
    # A chain no verifier accepts, whatever its anchors, is not extended: until review R61 one
    # whose links did not connect was, and ``grant delegate`` recorded its forged link as a grant.
    if not chain._sound:
        unsound = unsound_finding(chain)
        if unsound is not None:
            raise error_for(unsound)
        object.__setattr__(chain, "_sound", True)  # frozen: a cache, as ``_parsed``
    tip = chain.tip
    if _signing_key(holder, "the holder").did != tip.audience:
        raise error_for(
            _finding(
                _TRUST,
                "not_the_audience",
                f"{_short(holder.did)} cannot delegate a grant given to {_short(tip.audience)}: "
                "delegate with the key of its holder, or ask its holder for a grant of your own",
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
        raise error_for(_finding(_SCOPE, "delegation_not_allowed", NO_FURTHER_DELEGATION, tip, "max_depth"))
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
        chain_bytes=len(chain.token),
    )
    refused = first_link_finding(chain.links, grant)
    if refused is not None:
        raise error_for(refused)
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
    skew = _skew(skew)
    parsed = _signed_chain(chain)
    found = chain_finding(parsed, _anchors(trusted)) or time_finding(parsed, _now(now), skew)
    if found is not None:
        raise error_for(found)
    return parsed
