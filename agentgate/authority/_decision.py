"""Decisions: allow, deny or approval required, for one signed invocation (or one call by the key holder).

Order of checks (docs/token-format.md, "Deciding"): the chain (from the cache, or parsed and
verified and then cached by its token), holder binding, the invocation signature, the call
against the signed fields, validity times, coverage by the tip's capabilities, the approval hook,
and finally one store statement that checks revocation of every link and records the nonce.
A decision's principal is the invocation's signer only once its signature verified: a denial
made before that check names the claimed signer only if the signature verifies under its key.
Everything that depends on time or on the store is checked on every decision; only the
time-independent verification of the chain (signatures, links, attenuation) is cached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentgate._shown import quoted
from agentgate._time import when
from agentgate.authority._chain_cache import _SHARED_CACHE, ChainCache
from agentgate.authority._chain_findings import (
    EDITED_CHAIN_FIX,
    _short,
    chain_finding,
    revoked_finding,
    time_finding,
)
from agentgate.authority._encoding import sha256_hex
from agentgate.authority._grant import DEFAULT_SKEW, Budget, Chain, Grant
from agentgate.authority._invocation import (
    INVOCATION_CONTEXT,
    MAX_INVOCATION_TTL,
    Invocation,
    args_digest,
)
from agentgate.authority._operations import _now, _skew
from agentgate.authority._parsing import parse_chain
from agentgate.authority._revocation import HolderRevocation, checked_repo, revoke, revoke_holder
from agentgate.authority._signatures import TrustAnchors, _anchors, verify_signature
from agentgate.capabilities import (
    Call,
    Capability,
    canonical_resource,
    covers,
    format_capability,
    pattern_matches,
)
from agentgate.capabilities._canonical import _prechecked
from agentgate.errors import CapabilityError, InputError, InvalidSignature, StoreError, TokenFormatError
from agentgate.findings import Finding, FindingKind, Outcome
from agentgate.keys import PublicKey, SigningKey
from agentgate.store.grants import GrantRepository

_SCOPE = FindingKind.SCOPE_CREEP
_TRUST = FindingKind.IMPLICIT_TRUST_INHERITANCE
_REVOCABLE = FindingKind.NON_REVOCABLE_GRANT
_OPACITY = FindingKind.AUTHORITY_CHAIN_OPACITY

_log = logging.getLogger("agentgate.authority")
"""Where a failing approval hook's error is told in full (``_approval_check_failed``)."""


class _NoAnswer(TypeError):
    """An approval hook's answer that is neither ``None`` nor an ``ApprovalRequirement``: its
    text is agentgate's own and names only the answer's type, so a refusal may quote it."""


_ARGS_FIX = "pass arguments JSON can carry (text keys, finite numbers, valid Unicode text)"
"""The fix of ``args_not_canonical``; ``_UNREADABLE_FIX`` that of ``malformed_token`` (until
review R64 each named only what was wrong)."""
_UNREADABLE_FIX = "present the token exactly as it was written (grant issue, grant delegate), or ask its issuer for a new one"


@dataclass(frozen=True)
class ApprovalRequirement:
    """What the approval hook asks for: who may approve, how many of them, and why.

    Raises ``InputError`` naming the field for ``approvers`` that is not a tuple of strings (a
    string alone, ``"alice"`` for ``("alice",)``, was read letter by letter until
    review R94), a ``quorum`` that is not a whole number from 1 to the number of approvers (1
    when none is named), or a ``reason`` that is not a string. A hook that builds a bad one fails
    closed: its decision is an ``approval_check_failed`` deny.
    """

    approvers: tuple[str, ...]
    quorum: int = 1
    reason: str = ""

    def __post_init__(self) -> None:
        approvers: object = self.approvers
        if not isinstance(approvers, tuple):
            raise InputError(
                f"ApprovalRequirement approvers must be a tuple of approver names, not "
                f"{type(approvers).__name__}: name one as approvers=('alice',)"
            )
        for i, name in enumerate(approvers):
            if not isinstance(name, str):
                raise InputError(
                    f"ApprovalRequirement approvers[{i}] must be an approver's name, not {type(name).__name__}"
                )
        quorum: object = self.quorum
        most = max(len(approvers), 1)
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= most:
            what = quoted(quorum) if isinstance(quorum, int) else type(quorum).__name__
            raise InputError(
                f"ApprovalRequirement quorum must be a whole number from 1 to {most} (the approvers "
                f"named), not {what}"
            )
        if not isinstance(self.reason, str):
            raise InputError(f"ApprovalRequirement reason must be a string, not {type(self.reason).__name__}")

    @property
    def asked(self) -> str:
        """The reason a decision that needs this approval gives, which its ``approval_required``
        audit entry records (``approval sign --store`` reads it back from the payload's words)."""
        asked = f"approval required from {', '.join(self.approvers) or 'an approver'}"
        return f"{asked}: {self.reason}" if self.reason else asked


class ApprovalHook(Protocol):
    """Given a verified call and chain, says whether a human must approve it first.

    The Gate passes one in; it returns ``None`` when no approval is needed, or when a valid
    approval for this call has already been given (the Gate checks approvals). ``invocation`` is
    the signed invocation, or ``None`` for a decision made with the holder's key in hand
    (``Authority.decide_held``).
    """

    def __call__(
        self, call: Call, chain: Chain, invocation: Invocation | None
    ) -> ApprovalRequirement | None: ...


@dataclass(frozen=True)
class Decision:
    """The answer for one invocation, with the evidence an audit entry needs."""

    outcome: Outcome
    reasons: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    principal: str | None = None
    """The invoking principal: the invocation's signer once its signature verified under the key
    its ``iss`` names (the holder's key for ``decide_held``); ``None`` on a denial of an invocation
    whose signature does not verify, whose claimed signer proved nothing (until review R56 it named
    it, so a forger's denials were recorded as someone else's)."""
    resource: str | None = None
    action: str | None = None
    args_digest: str | None = None
    chain: tuple[str, ...] = ()
    """Grant ids, root first, when the chain could be parsed."""
    invocation_id: str | None = None
    budgets: tuple[tuple[str, Budget], ...] = ()
    """(grant id, budget) of every link that has one: a spend counts against each."""
    approval: ApprovalRequirement | None = None
    decided_at: int = 0
    call: Call | None = field(default=None, compare=False, repr=False)

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOW

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``grant check --json``)."""
        return {
            "outcome": self.outcome.value,
            "reasons": list(self.reasons),
            "findings": [f.as_json() for f in self.findings],
            "principal": self.principal,
            "resource": self.resource,
            "action": self.action,
            "args_digest": self.args_digest,
            "chain": list(self.chain),
            "invocation_id": self.invocation_id,
            "budgets": [{"grant": g, **b.to_dict()} for g, b in self.budgets],
            "approval": None
            if self.approval is None
            else {
                "approvers": list(self.approval.approvers),
                "quorum": self.approval.quorum,
                "reason": self.approval.reason,
            },
            "decided_at": self.decided_at,
        }


def _f(
    kind: FindingKind, code: str, message: str, grant: str | None = None, field: str | None = None
) -> Finding:
    return Finding(kind=kind, code=code, message=message, grant=grant, field=field)


def _not_covered(call: Call, capabilities: tuple[Capability, ...], grant: str) -> Finding:
    """The ``call_not_covered`` finding of ``call``, which no capability of the grant covers: the
    first constrained argument it lacks or holds outside its constraint, each with its fix (until
    review R65 a missing one named none), else what the grant holds."""
    for cap in capabilities:
        if pattern_matches(cap.resource, call.resource) and cap.action in ("*", call.action):
            for name, constraint in cap.constraints:
                if name not in call.args:
                    return _f(
                        _SCOPE,
                        "call_not_covered",
                        f"argument {name} is required by {format_capability(cap)} but missing from the "
                        f"call; pass {name}, within the constraint, or ask for a grant that does not "
                        f"constrain {name}",
                        grant,
                        f"constraints.{name}",
                    )
                if not constraint.allows(call.args[name]):
                    return _f(
                        _SCOPE,
                        "call_not_covered",
                        f"{name}={call.args[name]!r} is outside the granted "
                        f"{format_capability(cap)}; ask for a grant that covers it",
                        grant,
                        f"constraints.{name}",
                    )
    held = ", ".join(format_capability(c) for c in capabilities)
    return _f(
        _SCOPE,
        "call_not_covered",
        f"the grant does not cover {call.resource} {call.action}: ask for a grant that covers it "
        f"(it holds {held})",
        grant,
        "capabilities",
    )


def decide(
    invocation: Invocation,
    *,
    repo: GrantRepository,
    trusted: PublicKey | str | Iterable[PublicKey | str],
    approvals: ApprovalHook | None = None,
    now: float | None = None,
    skew: int = DEFAULT_SKEW,
    cache: ChainCache | None = None,
) -> Decision:
    """Decide ``invocation`` against the trust anchors ``trusted``; never raises for bad input.

    Every failure is a ``deny`` with one finding (kind, code, message); a store that cannot be
    read is a deny (``non_revocable_grant``/``revocation_unreachable``): fail closed. The nonce is
    recorded only when the answer is ``allow``, so an ``approval_required`` invocation may be
    decided again once the approval exists. A caller's bug is raised, not decided: ``InputError``
    for an ``invocation`` that is not an ``Invocation`` (of a ``Call``), a ``repo`` that is not a
    ``GrantRepository`` (the ``Store`` itself, ``None``), a ``now`` that is not a finite number, a
    ``skew`` that is not a whole number of seconds, 0 or more, and a ``cache`` that is not a
    ``ChainCache``; ``TokenFormatError`` for ``trusted`` that is not anchors.
    """
    checked = checked_repo(repo, "a decision")
    if cache is not None and not isinstance(cache, ChainCache):
        raise _not_a("a ChainCache as its cache", cache)
    anchors = _anchors(trusted)
    return _decide(invocation, checked, anchors, approvals, now, _skew(skew), cache or _SHARED_CACHE)


def _verified_chain(
    token: str, anchors: frozenset[str], cache: ChainCache
) -> tuple[Chain | None, tuple[str, ...], Finding | None]:
    """The chain of ``token`` verified against ``anchors`` (from the cache, or parsed, verified and
    cached), its grant ids when readable, and the finding when it is not valid."""
    try:
        chain = cache.get(anchors, token)
    except TypeError:  # an unhashable token in a hand-built invocation: parse_chain names it
        chain = None
    if chain is not None:
        return chain, chain.ids, None
    try:
        chain = parse_chain(token)
    except TokenFormatError as exc:
        return (
            None,
            (),
            _f(_OPACITY, "malformed_token", f"the chain cannot be read: {exc}; {_UNREADABLE_FIX}"),
        )
    found = chain_finding(chain, anchors)
    if found is not None:
        return None, chain.ids, found
    cache.put(anchors, token, chain)
    return chain, chain.ids, None


def _signer(inv: Invocation, payload: bytes) -> str | None:
    """``inv.issuer`` when the invocation's signature verifies under the key that DID names, else
    ``None``: a decision names no principal its signature did not prove."""
    try:
        verify_signature(inv.issuer, INVOCATION_CONTEXT + payload, inv.signature)
    except (InvalidSignature, TypeError):  # TypeError: a hand-built signature that is not bytes
        return None
    return inv.issuer


def _denial(
    t: int,
    call: Call,
    principal: str | None,
    digest: str | None,
    ids: tuple[str, ...],
    invocation_id: str | None,
) -> Callable[[Finding], Decision]:
    def deny(finding: Finding) -> Decision:
        return Decision(
            Outcome.DENY,
            (finding.message,),
            (finding,),
            principal=principal,
            resource=call.resource,
            action=call.action,
            args_digest=digest,
            chain=ids,
            invocation_id=invocation_id,
            decided_at=t,
            call=call,
        )

    return deny


def _wrong_holder(holder: str, tip: Grant, signed: bool) -> Finding:
    who = (
        f"invocation signed by {_short(holder)}" if signed else f"call made with the key of {_short(holder)}"
    )
    return _f(
        _TRUST,
        "wrong_holder",
        f"{who}, but this chain was granted to {_short(tip.audience)}; a copied token is useless: "
        "delegate to the caller's own key instead",
        tip.id,
        "audience",
    )


def _resource_finding(call: Call, tip: Grant) -> Finding | None:
    """``ambiguous_resource`` for a resource name that is not canonical, else ``None``."""
    try:
        canonical_resource(call.resource)
    except CapabilityError as exc:
        return _f(
            _OPACITY,
            "ambiguous_resource",
            f"{exc}; refused rather than guessed: make the call on the resource's canonical name",
            tip.id,
            "resource",
        )
    return None


def _digest(call: Call, tip: Grant) -> tuple[str, None] | tuple[None, Finding]:
    """The call's argument digest, or ``args_not_canonical`` when the arguments have none."""
    try:
        return args_digest(call.args), None
    except TokenFormatError as exc:
        return None, _f(
            _OPACITY,
            "args_not_canonical",
            f"call arguments cannot be digested: {exc}; {_ARGS_FIX}",
            tip.id,
            "args",
        )


def _not_a(expected: str, value: object) -> InputError:
    """The error for a value of the wrong Python type given to a decision: a caller's bug, not
    input to decide on (so raised, not a deny)."""
    return InputError(f"a decision takes {expected}, got {type(value).__name__}")


def _decide(
    inv: Invocation,
    repo: GrantRepository,
    anchors: frozenset[str],
    approvals: ApprovalHook | None,
    now: float | None,
    skew: int,
    cache: ChainCache,
) -> Decision:
    if not isinstance(inv, Invocation):
        raise _not_a("an Invocation (Invocation.sign or Invocation.decode)", inv)
    t = _now(now)
    call = inv.call
    if not isinstance(call, Call):
        raise _not_a("an invocation whose call is a Call", call)
    try:
        payload = inv.payload
    except TokenFormatError as exc:
        payload = b""
        malformed: str | None = str(exc)
    else:
        malformed = None
    invocation_id = sha256_hex(payload) if malformed is None else None

    chain, ids, found = _verified_chain(inv.chain_token, anchors, cache)

    def unproven(finding: Finding) -> Decision:
        """A denial before the signature check: its principal is the claimed signer only if the
        signature verifies under the key that signer names (else anyone could be named)."""
        signer = _signer(inv, payload) if malformed is None else None
        return _denial(t, call, signer, inv.args_digest, ids, invocation_id)(finding)

    if chain is None:
        assert found is not None
        return unproven(found)
    tip = chain.tip
    if inv.issuer != tip.audience:
        return unproven(_wrong_holder(inv.issuer, tip, signed=True))
    if inv.tip != tip.id:
        return unproven(
            _f(
                _OPACITY,
                "tip_mismatch",
                "the invocation names a different grant than the chain's tip; sign the call for the "
                "chain presented with it",
                tip.id,
                "tip",
            )
        )
    if malformed is not None or _signer(inv, payload) is None:
        return _denial(t, call, None, inv.args_digest, ids, invocation_id)(
            _f(
                _OPACITY,
                "bad_invocation_signature",
                f"the invocation is not validly signed by {_short(inv.issuer)}; sign the call with the "
                "key of the chain's holder",
                tip.id,
                "signature",
            )
        )
    deny = _denial(t, call, inv.issuer, inv.args_digest, ids, invocation_id)  # the signer is proven
    found = _resource_finding(call, tip)
    if found is not None:
        return deny(found)
    if call.resource != inv.resource or call.action != inv.action:
        return deny(
            _f(
                _OPACITY,
                "call_mismatch",
                f"the invocation was signed for {inv.resource} {inv.action}, not "
                f"{call.resource} {call.action}; sign the call that is made",
                tip.id,
                "resource",
            )
        )
    digest, found = _digest(call, tip)
    if digest is None:
        assert found is not None
        return deny(found)
    if digest != inv.args_digest:
        return deny(
            _f(
                _OPACITY,
                "args_digest_mismatch",
                "the call's arguments differ from the ones the caller signed; sign the call again "
                "with the arguments it is made with",
                tip.id,
                "args",
            )
        )
    if t >= inv.expires:
        return deny(
            _f(
                _SCOPE,
                "invocation_expired",
                f"the invocation expired at {when(inv.expires)} (now {when(t)}); sign the call again",
                tip.id,
                "expiry",
            )
        )
    if not 0 < inv.expires - inv.issued_at <= MAX_INVOCATION_TTL:
        # The wire form refuses such an invocation (``Invocation.decode``); one built in Python
        # must not get further: its nonce would be kept for as long as it claims to live.
        return deny(
            _f(
                _SCOPE,
                "invocation_lifetime",
                f"the invocation is valid from {when(inv.issued_at)} to {when(inv.expires)}; an invocation lives "
                f"1 to {MAX_INVOCATION_TTL} seconds: sign the call again",
                tip.id,
                "expiry",
            )
        )
    if inv.issued_at > t + skew:
        return deny(
            _f(
                _SCOPE,
                "invocation_not_yet_valid",
                f"the invocation is dated {when(inv.issued_at)}, more than "
                f"{skew}s after now ({when(t)}); check the caller's clock",
                tip.id,
                "issued_at",
            )
        )
    return _conclude(chain, call, digest, t, skew, approvals, inv, repo, inv.issuer, invocation_id, deny)


def _decide_held(
    holder: str,
    token: str,
    claimed: tuple[str, ...] | None,
    call: Call,
    repo: GrantRepository,
    anchors: frozenset[str],
    approvals: ApprovalHook | None,
    now: float | None,
    skew: int,
    cache: ChainCache,
) -> Decision:
    t = _now(now)
    chain, ids, found = _verified_chain(token, anchors, cache)
    deny = _denial(t, call, holder, None, ids, None)
    if chain is None:
        assert found is not None
        return deny(found)
    tip = chain.tip
    if claimed is not None and claimed != ids:
        # A Chain object whose links are not its token's: its caller would reserve budget,
        # audit and bind approvals by grants this decision never saw.
        return deny(
            _f(
                _OPACITY,
                "tip_mismatch",
                f"the chain's links are not the ones its token carries; {EDITED_CHAIN_FIX}",
                tip.id,
                "tip",
            )
        )
    if holder != tip.audience:
        return deny(_wrong_holder(holder, tip, signed=False))
    found = _resource_finding(call, tip)
    if found is not None:
        return deny(found)
    digest, found = _digest(call, tip)
    if digest is None:
        assert found is not None
        return deny(found)
    return _conclude(chain, call, digest, t, skew, approvals, None, repo, holder, None, deny)


def _approval_check_failed(exc: Exception, call: Call, grant_id: str) -> Finding:
    """The refusal of a call whose approval hook raised ``exc``, and the hook's error logged in
    full (``agentgate.authority``, with its traceback) for the operator. The finding names the
    exception's type only: its message is the refusal's reason, which the caller is answered, an
    audit entry keeps and a model may be told, and a hook's error text may carry what none of them
    should see (a store path, a URL with its password, a SQL statement; until review R65b it was
    quoted). agentgate's own text for an answer that is no answer (``_NoAnswer``) is quoted."""
    _log.warning(
        "agentgate: the approval check failed for %s %s on grant %s; the call is refused",
        call.resource,
        call.action,
        grant_id,
        exc_info=exc,
    )
    what = f"TypeError: {exc}" if isinstance(exc, _NoAnswer) else type(exc).__name__
    return _f(
        _OPACITY,
        "approval_check_failed",
        f"the approval check failed ({what}); failing closed: repair the approval check (its error "
        "is logged by agentgate.authority), then make the call again",
        grant_id,
    )


def _conclude(
    chain: Chain,
    call: Call,
    digest: str,
    t: int,
    skew: int,
    approvals: ApprovalHook | None,
    inv: Invocation | None,
    repo: GrantRepository,
    principal: str,
    invocation_id: str | None,
    deny: Callable[[Finding], Decision],
) -> Decision:
    """What every decision checks once the caller is bound to the chain: validity times, coverage,
    the approval hook, and one store statement for revocation (and the nonce of a signed
    invocation that is allowed)."""
    tip, ids = chain.tip, chain.ids
    if not chain.not_before - skew <= t < chain.expires:
        found = time_finding(chain, t, skew)
        if found is not None:
            return deny(found)
    if not any(covers(cap, call) for cap in tip.capabilities):
        return deny(_not_covered(call, tip.capabilities, tip.id))
    try:
        requirement = approvals(call, chain, inv) if approvals is not None else None
        if requirement is not None and not isinstance(requirement, ApprovalRequirement):
            # ``False`` for "no approval needed" is an easy slip; it is no answer, not an allow.
            raise _NoAnswer(f"it answered a {type(requirement).__name__}, not an ApprovalRequirement or None")
        # Worded here, in the try: an answer that cannot be (one built around ``__init__``'s
        # checks) is refused as the hook's failure, not raised from the decision.
        asked = None if requirement is None else requirement.asked
    except Exception as exc:  # a failing approval check must not let the call through: fail closed
        return deny(_approval_check_failed(exc, call, tip.id))
    try:
        if requirement is None and inv is not None:
            # Keyed by the signed expiry plus a fixed 30 s, never this verifier's ``skew``: two
            # verifiers configured with different tolerances share one nonce table, and a key that
            # held the skew let each of them accept the same invocation once (a replay). The fixed
            # 30 s keeps the keys of nonces recorded before (at the default skew) the same.
            status = repo.consume_nonce(inv.issuer, inv.nonce, inv.expires + DEFAULT_SKEW, ids)
        else:
            status = "revoked" if repo.revoked(ids) else "fresh"
    except StoreError as exc:
        return deny(
            _f(
                _REVOCABLE,
                "revocation_unreachable",
                # Not only "restore the store" (until review R81): a role without its rights on
                # the store's tables is refused here too, and a server away comes back.
                f"the revocation state cannot be read ({exc}); failing closed: retry once the store "
                "answers (its server back, its file restored, or its role granted the rights "
                "docs/operations.md, PostgreSQL set-up, lists)",
                tip.id,
            )
        )
    if status == "revoked":
        try:
            revoked = repo.revoked(ids)
        except StoreError:
            revoked = set()
        return deny(revoked_finding(ids, revoked))
    if status == "replay":
        return deny(
            _f(
                _TRUST,
                "replayed_invocation",
                "this invocation's nonce was already used; each call must be signed afresh",
                tip.id,
                "nonce",
            )
        )
    outcome = Outcome.ALLOW if requirement is None else Outcome.APPROVAL_REQUIRED
    reason = (
        f"{call.resource} {call.action} is covered by grant {tip.id[:16]}... held by {principal}"
        if asked is None
        else asked
    )
    # Every field given, each of its declared type: built without the frozen dataclass's
    # ``__init__`` (13 ``object.__setattr__`` calls, ~6 us of a ~230 us warm decision).
    return _prechecked(
        Decision,
        outcome=outcome,
        reasons=(reason,),
        findings=(),
        principal=principal,
        resource=call.resource,
        action=call.action,
        args_digest=digest,
        chain=ids,
        invocation_id=invocation_id,
        budgets=chain.budgets,
        approval=requirement,
        decided_at=t,
        call=call,
    )


class Authority:
    """The authority engine bound to one store and one set of trust anchors, with its own chain cache.

    Raises ``InputError`` for a ``repo`` that is not a ``GrantRepository`` (the ``Store`` itself,
    ``None``: refused here, not on the first call allowed), a ``skew`` that is not a whole number
    of seconds from 0 to ``MAX_SKEW`` and a ``cache_size`` that is not a whole number, 1 or more
    (``ChainCache``). What it checked stays as checked: ``repo``, ``anchors``, ``approvals``,
    ``skew`` and ``cache`` are read-only, and assigning one raises ``AttributeError`` (an engine
    for another store or other anchors is a new ``Authority``).
    """

    def __init__(
        self,
        repo: GrantRepository,
        trusted: PublicKey | str | Iterable[PublicKey | str],
        *,
        approvals: ApprovalHook | None = None,
        skew: int = DEFAULT_SKEW,
        cache_size: int = 4096,
    ) -> None:
        self._checked_repo = checked_repo(repo, "Authority")
        self._checked_anchors = _anchors(trusted)
        self._approvals = approvals
        self._checked_skew = _skew(skew)
        self._cache = ChainCache(cache_size)

    # Each read-only, as ``skew`` since review R53: until review R88 a value assigned after the
    # checks above reached ``_decide`` unchecked (a ``Store`` as ``repo`` raised on the first
    # allowed call, a list of anchors made every valid call a ``TypeError``, a string of them made
    # the trust check a substring test).

    @property
    def repo(self) -> GrantRepository:
        """The grant store decisions read revocation from and record nonces in; read-only."""
        return self._checked_repo

    @property
    def anchors(self) -> TrustAnchors:
        """The trust anchors a chain's root must be issued by, as checked; read-only."""
        return self._checked_anchors

    @property
    def approvals(self) -> ApprovalHook | None:
        """The approval hook asked about each covered call, or ``None``; read-only."""
        return self._approvals

    @property
    def cache(self) -> ChainCache:
        """This engine's cache of verified chains (``cache_size`` of them at most); read-only."""
        return self._cache

    @property
    def skew(self) -> int:
        """Seconds of clock tolerance on not-before and invocation times, as configured; read-only
        (until review R53 it could be set to a NaN, a negative or a huge value after the check)."""
        return self._checked_skew

    def decide(self, invocation: Invocation, *, now: float | None = None) -> Decision:
        """``decide`` with this engine's store, anchors, hook and cache."""
        # The fields, not their read-only properties: a decision is timed per microsecond.
        return _decide(
            invocation,
            self._checked_repo,
            self._checked_anchors,
            self._approvals,
            now,
            self._checked_skew,
            self._cache,
        )

    def decide_held(
        self, holder: SigningKey, chain: Chain | str, call: Call, *, now: float | None = None
    ) -> Decision:
        """Decide ``call`` for the holder of ``chain`` when the caller holds the holder's private key.

        For a caller in the holder's own process (the ``Gate``, which keeps each agent's key): it
        has the key in hand, so signing an invocation only to verify that signature at once would
        prove nothing more, and with no signed invocation there is nothing to replay, so no nonce
        is recorded. Every other check is ``decide``'s: the chain (verified from its token, never
        from a ``Chain`` object's fields, and a ``Chain`` whose grant ids differ from its token's is
        refused, ``tip_mismatch``), holder binding (``holder``'s DID must be the tip's
        audience), the resource and arguments, validity times, coverage, the approval hook
        (called with ``invocation=None``), and revocation read from the store. Never raises for
        bad input; a store that cannot be read is a deny. A caller's bug is raised: ``InputError``
        for a ``call`` that is not a ``Call`` and a ``now`` that is not a finite number.
        """
        if not isinstance(call, Call):
            raise _not_a("a Call (Call.tool, Call.model)", call)
        token, ids = (chain.token, chain.ids) if isinstance(chain, Chain) else (chain, None)
        if not isinstance(holder, SigningKey):
            # A public key (or anything else) proves nothing: holder binding needs the private key,
            # and the decision names no principal (until review R56: the public key's DID).
            return _denial(_now(now), call, None, None, (), None)(
                _f(
                    _TRUST,
                    "holder_key_missing",
                    "the call was made without the holder's private key (a public key proves nothing): "
                    "an agent acts with its own signing key",
                    None,
                    "audience",
                )
            )
        return _decide_held(
            holder.did, token, ids, call, self.repo, self.anchors, self.approvals, now, self.skew, self.cache
        )

    def revoke(self, grant: Chain | str, *, reason: str = "", now: float | None = None) -> str:
        """Revoke a grant (a chain: its tip; or a grant id); see ``revoke``."""
        return revoke(self.repo, grant, reason=reason, now=now)

    def revoke_holder(
        self, holder: PublicKey | str, *, reason: str = "", now: float | None = None
    ) -> HolderRevocation:
        """Revoke every grant this store records for ``holder``; see ``revoke_holder``."""
        return revoke_holder(self.repo, holder, reason=reason, now=now)
