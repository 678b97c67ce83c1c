"""What stops a chain from being valid, as findings, and the exception that enforces each.

The root issuer must be a trust anchor the verifier was given; every later issuer must be the
audience of the link before it, whose key that link's (already verified) signer vouched for, and
every link must attenuate its parent. Time is checked apart (``time_finding``), so what
``chain_finding`` answers may be cached by token.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from agentgate._shown import shown
from agentgate._time import when
from agentgate.authority._grant import DEFAULT_SKEW, GRANT_CONTEXT, Chain, Grant
from agentgate.authority._signatures import TrustAnchors, verify_signature
from agentgate.capabilities import (
    Call,
    Capability,
    attenuates,
    covered_together,
    covers,
    format_capability,
    pattern_within,
    uncovered_call,
    witness,
)
from agentgate.errors import (
    AgentGateError,
    AuthorityError,
    Denied,
    Expired,
    InvalidSignature,
    Revoked,
    ScopeCreep,
)
from agentgate.findings import Finding, FindingKind

_SCOPE = FindingKind.SCOPE_CREEP
_TRUST = FindingKind.IMPLICIT_TRUST_INHERITANCE
_REVOCABLE = FindingKind.NON_REVOCABLE_GRANT
_OPACITY = FindingKind.AUTHORITY_CHAIN_OPACITY


_PRESENT_AS_DELEGATED = "present the chain as it was delegated, every link in order from the root"
"""The fix of a chain whose links do not connect (``parent_mismatch``, ``root_has_parent``)."""

EDITED_CHAIN_FIX = "pass the Chain parsed from its token (parse_chain), unedited"
"""The fix of ``tip_mismatch`` for a ``Chain`` object whose links are not its token's."""

NO_FURTHER_DELEGATION = (
    "the parent grant allows no further delegation (max depth 0); ask its issuer for a "
    "grant that allows delegation, or for the sub-agent's own grant"
)
"""The message of ``delegation_not_allowed``, whether ``delegate`` refuses to sign the link or a
verifier reads one signed by hand (until review R64 ``delegate``'s named no fix)."""


def _finding(
    kind: FindingKind, code: str, message: str, grant: Grant | None, field: str | None = None
) -> Finding:
    return Finding(kind=kind, code=code, message=message, grant=grant.id if grant else None, field=field)


def _short(did: str) -> str:
    if not isinstance(did, str):  # a hand-built invocation's issuer: by its type, as did_refusal
        return shown(did)  # names it (its repr quoted a seed given as bytes until review R86c)
    return did if len(did) <= 24 else did[:16] + "..." + did[-6:]


def _widened_constraint(p: Capability, call: Call) -> str | None:
    """The first constraint of ``p`` that ``call`` fails (``None`` when it fails none)."""
    for name, constraint in p.constraints:
        if name not in call.args or not constraint.allows(call.args[name]):
            return name
    return None


def _constraint_finding(child: Grant, cap: Capability, p: Capability, call: Call, name: str) -> Finding:
    """``constraint_widened``: ``cap`` allows ``call``, which fails ``p``'s constraint on ``name``."""
    if name not in cap.constraint_map:
        # The witness of a dropped constraint is a made-up value (``'\x00zz-witness'``)
        # that says nothing to the person who dropped it.
        allows = f"leaves {name} unconstrained (any value, or none)"
    else:
        allows = f"allows {name}={call.args.get(name, '<any value>')!r}"
    # What the parent holds ends the message, as ``(it holds ...)``: a refusal told to
    # a model leaves it out (``gate._records.without_held``), since it pins what an
    # argument the framework injects may be filled with (an API key).
    return _finding(
        _SCOPE,
        "constraint_widened",
        f"child capability {format_capability(cap)} {allows}, which the parent's capability "
        f"does not; narrow {name} to within the parent's constraint (it holds {format_capability(p)})",
        child,
        f"constraints.{name}",
    )


def _uncovered(
    held: Sequence[Capability], cap: Capability, base: Call, near: Sequence[Capability]
) -> tuple[Capability, Call, str] | None:
    """A call ``cap`` allows that none of ``held`` covers, found near their bounds
    (``uncovered_call``, from ``base``, a witness, with its arguments ``cap``'s own); with the
    first of ``near`` (the capabilities of ``cap``'s resource and action) that it fails on the
    argument changed, else the first, and the constraint of that one it fails."""
    constrained = cap.constraint_map
    own = Call(base.resource, base.action, {n: v for n, v in base.args.items() if n in constrained})
    found = uncovered_call(held, cap, own)
    if found is None:
        return None
    changed, call = found
    failing = [(p, _widened_constraint(p, call)) for p in near]
    p, name = next(((p, n) for p, n in failing if n == changed), failing[0])
    assert name is not None  # a call no capability covers fails each near one on a constraint
    return p, call, name


def _capability_finding(parent: Grant, child: Grant, cap: Capability) -> Finding | None:
    # ``attenuates`` is exact and agrees with ``witness`` (property-tested), without building
    # witness calls: the common case of a valid link costs no more than that.
    for p in parent.capabilities:
        if attenuates(p, cap):
            return None
    witnesses: list[Call] = []  # one for each parent capability, in their order
    near: list[tuple[Capability, Call]] = []  # those of the capabilities of ``cap``'s resource and action
    far: list[Call] = []  # the others
    for p in parent.capabilities:
        call = witness(p, cap)
        if call is None:
            return None
        witnesses.append(call)
        if pattern_within(cap.resource, p.resource) and p.action in ("*", cap.action):
            near.append((p, call))
        else:
            far.append(call)
    if near:
        # The call named is one no parent capability covers, where a witness is one: until review
        # R89 it was checked against the nearest capability only, and a child within two of them
        # together (``amount<=100`` and ``amount>100&amount<=500``) was told a call the parent
        # allows (``amount=500``) and to narrow to the first. The near capabilities' witnesses go
        # first, so a parent with one of them names its witness as before; the rest are named
        # against the first. At most ``MAX_CAPABILITIES`` squared coverage checks, on a refusal.
        first = near[0]
        tried = near + [(first[0], call) for call in far]
        for p, call in tried:
            name = _widened_constraint(p, call)
            if name is not None and not any(covers(held, call) for held in parent.capabilities):
                return _constraint_finding(child, cap, p, call, name)
        # Each witness may be a call another parent capability covers (``amount<=100`` and
        # ``amount>=200``, child ``amount<=1000``): a call between their bounds (``amount=101``)
        # is looked for next, against the near capability it fails on that argument.
        found = _uncovered(parent.capabilities, cap, first[1], [p for p, _ in near])
        if found is not None:
            return _constraint_finding(child, cap, *found)
        name = _widened_constraint(*first)
        if name is not None:
            held = ", ".join(format_capability(p) for p in parent.capabilities)
            # Until review R89b this said "even where several together cover it" also where they
            # did not, and no call was named (``amount<100`` and ``amount>100``, child ``amount>=0``).
            if covered_together(parent.capabilities, cap):
                fix = ", even where several together cover it, as here; split it into capabilities each within one"
            else:
                fix = "; delegate only capabilities each within one"
            return _finding(
                _SCOPE,
                "constraint_widened",
                f"child capability {format_capability(cap)} is within no single capability the "
                f"parent holds, and each delegated capability must be within one{fix} the parent "
                f"holds (it holds {held})",
                child,
                f"constraints.{name}",
            )
    call = witnesses[0]
    held = ", ".join(format_capability(p) for p in parent.capabilities)
    # What the witness makes up for a child's ``*`` (the action ``zz_witness``, the tool
    # ``tool:zz-witness``) names nothing the person wrote: the pattern is named instead.
    action = "every action" if cap.action == "*" else cap.action
    if cap.resource.endswith("*"):
        allows = f"{action} on resources matching {cap.resource} that no parent capability covers"
    elif cap.action == "*":
        allows = f"every action on {call.resource}, which no parent capability covers"
    else:
        allows = f"{call.resource} {call.action}, which no parent capability covers"
    return _finding(
        _SCOPE,
        "capability_widened",
        f"child capability {format_capability(cap)} allows {allows}; "
        f"delegate only capabilities within one the parent holds (it holds {held})",
        child,
        "capabilities",
    )


def link_findings(links: Sequence[Grant], child: Grant) -> list[Finding]:
    """Everything that stops ``child`` from attenuating the chain ``links`` (signatures aside),
    for ``agentgate grant inspect`` and ``audit explain``; a decision needs only the first
    (``first_link_finding``)."""
    return list(_link_findings(links, child))


def first_link_finding(links: Sequence[Grant], child: Grant) -> Finding | None:
    """The first of ``link_findings(links, child)``, found without looking for the rest.

    Until review R94 a decision, ``verify_chain`` and ``delegate`` built every finding of a
    refused link and used the first: a widened link of 16 constrained capabilities ran the
    witness search of each (about 20 times the work), on every presentation, since a refused
    chain is not cached."""
    return next(_link_findings(links, child), None)


def _link_findings(links: Sequence[Grant], child: Grant) -> Iterator[Finding]:
    """``link_findings``, one at a time in their order, each found only when asked for."""
    parent = links[-1]
    if child.parent != parent.id:
        yield _finding(
            _OPACITY,
            "parent_mismatch",
            "link does not name the previous link as its parent "
            f"(links reordered, spliced from another chain, or one dropped); {_PRESENT_AS_DELEGATED}",
            child,
            "parent",
        )
        return
    if child.issuer != parent.audience:
        yield _finding(
            _OPACITY,
            "issuer_not_parent_audience",
            f"link is signed by {_short(child.issuer)}, but "
            f"the parent grant was given to {_short(parent.audience)}; only the parent's holder "
            "may delegate it: sign the link with the key the parent grant was given to, or "
            "delegate from a grant of the signer's own",
            child,
            "issuer",
        )
        return
    if child.audience == child.issuer:
        yield _finding(
            _TRUST,
            "self_delegation",
            "a principal delegated to itself; delegate to the sub-agent's own key instead",
            child,
            "audience",
        )
    elif child.audience in {link.issuer for link in links} | {link.audience for link in links}:
        yield _finding(
            _TRUST,
            "delegation_cycle",
            f"{_short(child.audience)} already appears in this chain; "
            "authority may not flow back to an earlier holder: that holder uses the grant it already "
            "holds, and a delegation goes to a key not yet in the chain",
            child,
            "audience",
        )
    if parent.max_depth == 0:
        yield _finding(_SCOPE, "delegation_not_allowed", NO_FURTHER_DELEGATION, child, "max_depth")
    elif child.max_depth > parent.max_depth - 1:
        yield _finding(
            _SCOPE,
            "depth_widened",
            f"child allows {child.max_depth} further delegation levels; "
            f"the parent leaves at most {parent.max_depth - 1}: give it a max depth of at most "
            f"{parent.max_depth - 1}",
            child,
            "max_depth",
        )
    for cap in child.capabilities:
        found = _capability_finding(parent, child, cap)
        if found is not None:
            yield found
    if parent.budget is not None:
        if child.budget is None:
            yield _finding(
                _SCOPE,
                "budget_widened",
                f"child has no budget limit; the parent is limited to {parent.budget}: give the "
                "child a budget of at most the parent's",
                child,
                "budget",
            )
        elif child.budget.unit != parent.budget.unit:
            yield _finding(
                _SCOPE,
                "budget_unit_changed",
                f"child budget is in {child.budget.unit}, the parent's in {parent.budget.unit}: "
                f"give the child a budget in {parent.budget.unit}, at most the parent's",
                child,
                "budget",
            )
        elif child.budget.amount > parent.budget.amount:
            yield _finding(
                _SCOPE,
                "budget_widened",
                f"child budget {child.budget} exceeds the parent's {parent.budget}: lower it to "
                "at most the parent's",
                child,
                "budget",
            )
    if child.expires > parent.expires:
        left = parent.expires - child.not_before
        fix = (
            f": give it a ttl of at most {left}s"
            if left > 0
            else ": the parent has expired when it starts; delegate from a grant still valid then"
        )
        yield _finding(
            _REVOCABLE,
            "outlives_parent",
            f"child expires at {when(child.expires)}, after its parent "
            f"({when(parent.expires)}); a child never outlives its parent{fix}",
            child,
            "expiry",
        )
    if child.not_before < parent.not_before:
        yield _finding(
            _SCOPE,
            "starts_before_parent",
            f"child becomes valid at {when(child.not_before)}, before its parent "
            f"({when(parent.not_before)}); a child starts no earlier than its parent: sign it "
            f"with a not-before of {when(parent.not_before)} or later",
            child,
            "not_before",
        )


def root_findings(root: Grant) -> list[Finding]:
    """What stops ``root`` from starting a chain (trust anchors aside): it names a parent."""
    if root.parent is None:
        return []
    return [
        _finding(
            _OPACITY,
            "root_has_parent",
            "the first link names a parent: the chain's start was dropped, or its links reordered; "
            + _PRESENT_AS_DELEGATED,
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
            f"root grant issued by {_short(root.issuer)}, which is not a trust anchor of this verifier; "
            "present a chain from one of its trust anchors, or configure that key as one",
            root,
            "issuer",
        )
    root_key = anchors.public_keys.get(root.issuer) if isinstance(anchors, TrustAnchors) else None
    return _signatures_and_links(chain, root_key)


def unsound_finding(chain: Chain) -> Finding | None:
    """The first reason ``chain`` does not hold together whoever its trust anchors are (a first
    link that names a parent, a signature that does not verify, a link that does not attenuate
    or connect to the one before it); else ``None``. What ``delegate`` refuses to extend."""
    started = root_findings(chain.root)
    return started[0] if started else _signatures_and_links(chain, None)


def _signatures_and_links(chain: Chain, root_key: bytes | None) -> Finding | None:
    """The first signature that does not verify (the root's against ``root_key`` when given),
    else the first link that does not attenuate its parent; else ``None``."""
    # Every signature before any link check (steps 4 and 5 of the page, in that order): a chain
    # with a widened link and a forged one later is ``bad_signature``, as any verifier written
    # from the page answers.
    for i, link in enumerate(chain.links):
        try:
            verify_signature(
                link.issuer, GRANT_CONTEXT + link.payload, link.signature, root_key if i == 0 else None
            )
        except InvalidSignature:
            return _finding(
                _OPACITY,
                "bad_signature",
                f"link {i} is not validly signed by its issuer {_short(link.issuer)}: the token was "
                "altered or forged; ask its issuer for a new one",
                link,
                "signature",
            )
    for i in range(1, len(chain.links)):
        found = first_link_finding(chain.links[:i], chain.links[i])
        if found is not None:
            return found
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
                f"grant is valid from {when(link.not_before)} (now {when(now)}, tolerance {skew}s); "
                "wait until then, or check this host's clock",
                link,
                "not_before",
            )
    return None


def revoked_finding(
    ids: Sequence[str], revoked: Collection[str], *, since: str = "", delegator: str | None = None
) -> Finding:
    """The ``non_revocable_grant`` finding ``revoked`` of the chain of grant ``ids`` (root first),
    of which ``revoked`` are revoked: it names the first revoked link by position and id (in
    ``grant``) and ends with the fix. ``since`` follows "was revoked" (when it was found, e.g.
    " while the call waited for its approval"); ``delegator``, the name of the holder asked to
    hand the chain on, for a refused delegation (it hands nothing on), else a call's (``this
    chain``). With no id of ``ids`` in ``revoked`` (a store that answered "revoked" and then
    could not be read again) it names "a link" and the tip.

    The one wording of this fact: the authority engine, the Gate, the gateway, ``Gate.delegate``
    and ``agentgate grant delegate`` all give it (until review R65, three wordings, and the
    Gate's delegation named the revoked id that sorts first, in no ``grant`` field)."""
    which = next((i for i, grant in enumerate(ids) if grant in revoked), None)
    where = "a link" if which is None else f"link {which} ({ids[which][:16]}...)"
    whose = "this chain" if delegator is None else f"{delegator}'s chain"
    dead = "every grant below a revoked grant is dead"
    fix = (
        f"{dead}: ask for a new grant"
        if delegator is None
        else f"{dead}, so it hands nothing on: ask for a new grant for {delegator}"
    )
    return Finding(
        kind=_REVOCABLE,
        code="revoked",
        message=f"{where} of {whose} was revoked{since}; {fix}",
        grant=ids[-1 if which is None else which] if ids else None,
    )


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


def findings_of(error: AgentGateError) -> list[Finding]:
    """The finding an authority error carries, or an opacity finding for malformed input."""
    if isinstance(error, AuthorityError) and isinstance(error.finding, Finding):
        return [error.finding]
    return [Finding(kind=_OPACITY, code="malformed_token", message=str(error))]
