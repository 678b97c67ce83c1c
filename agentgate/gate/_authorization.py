"""What a decision about one call is: the verdict, the identity it was made for, and what it
reserved (``Authorization``), as ``Gate.authorize`` returns it; the refusal of a call on a chain
with a revoked link (``revoked_refusal``, its finding the authority package's ``revoked_finding``),
which the Gate and the gateway give alike; and the type
checks of the Gate's entry points (``expect``, ``listed``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate._shown import shown as shown  # re-exported: the Gate's parts quote arguments through it
from agentgate.authority import Chain, Decision
from agentgate.authority._chain_findings import revoked_finding
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.findings import Finding
from agentgate.keys import SigningKey


def expect(
    value: object,
    kind: type | tuple[type, ...],
    name: str,
    what: str,
    error: type[InputError] = InputError,
) -> None:
    """Raise ``error`` (``InputError`` by default) naming the parameter ``name``, what it takes
    (``what``) and the type it got, unless ``value`` is a ``kind``. For the public entry points
    of the Gate and its integrations: a wrong type is a programming error, refused before
    anything is written, never a bare ``TypeError``/``AttributeError`` from deep inside."""
    if not isinstance(value, kind):
        raise error(f"{name} must be {what}, got {shown(value)}")


def listed(value: object, name: str, what: str, error: type[InputError] = InputError) -> list[Any]:
    """``value``, a collection of ``what``, as a list; ``error`` naming ``name`` for one string
    (or bytes, or a mapping), which would be taken character by character (or key by key), and
    for anything that is not iterable. The items are the caller's to check (``error``: the one a
    bad item gives, so that a caller catches one error for the parameter)."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise error(f"{name} must be a list of {what}, got {shown(value)}")
    return list(value)


class Verdict:
    """The three answers a decision gives (the same words as ``authority.Outcome``)."""

    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


@dataclass(frozen=True)
class AgentIdentity:
    """Who an agent is in one run: its name, its own key, and the chain of grants it holds.

    Carried in the run's context, never in state or messages; its ``repr`` shows neither the
    key nor the token. ``InputError``, naming the field, for a ``name`` or ``tenant`` that is not
    text, a ``key`` that is not a ``SigningKey`` or a ``chain`` that is not a ``Chain``: until
    review R89 one built by hand so (a grant's token text as its chain, a DID as its key) was
    taken, and ``Gate.authorize`` and ``Gate.budget_usage`` failed deep inside with a bare
    ``AttributeError`` or ``TypeError``.
    """

    name: str
    key: SigningKey = field(repr=False)
    chain: Chain = field(repr=False)
    tenant: str = "default"
    """Informative: what the operator or the policy said when the grant was issued. Quotas, fair
    shares and leases count against ``Gate.tenant_of(identity)``, read from the policy."""
    audit_index: int | None = field(default=None, compare=False)
    """The index of the audit entry that recorded this identity's grant, when ``Gate.issue`` or
    ``Gate.delegate`` made it (a delegation's span links to it)."""

    def __post_init__(self) -> None:
        expect(self.name, str, "AgentIdentity.name", "the agent's name (text)")
        expect(
            self.key, SigningKey, "AgentIdentity.key", "the agent's own SigningKey, not its DID or public key"
        )
        expect(
            self.chain, Chain, "AgentIdentity.chain", "a Chain (parse_chain reads one from a grant's token)"
        )
        expect(self.tenant, str, "AgentIdentity.tenant", "text")

    @property
    def did(self) -> str:
        return self.key.did

    @property
    def grant_id(self) -> str:
        return self.chain.id


class _Once:
    """A flag that can be taken once, from any thread: ``take`` answers True the first time only.

    ``sealed`` is what the Gate that decided an allow, or recorded an approval request, recorded
    of it (itself, then the fields a run or a refusal depends on): an ``Authorization`` built by
    hand, or copied with another verdict, call, identity or decision (``dataclasses.replace``
    shares this object), does not match it and is neither run nor declined."""

    __slots__ = ("_lock", "sealed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sealed: tuple[object, ...] | None = None

    def take(self) -> bool:
        return self._lock.acquire(blocking=False)


@dataclass(frozen=True)
class Authorization:
    """A recorded decision about one call and what it reserved. Produced by ``Gate.authorize``."""

    verdict: str
    call: Call
    identity: AgentIdentity | None = field(repr=False)
    reasons: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    audit_index: int | None = None
    reservations: tuple[tuple[str, str, int], ...] = ()
    """(reservation id, unit, amount) held in the ledger until the outcome."""
    request: Mapping[str, Any] | None = None
    """The approval request, when the verdict is ``approval_required``."""
    approver: str | None = None
    decision: Decision | None = field(default=None, repr=False)
    """The authority engine's decision, when one was made."""
    budget_exhausted: bool = False
    """Refused because a budget of the chain has too little left: the run should end."""
    budget_never_fits: bool = False
    """Refused because the call alone costs more than a budget of the chain holds in all (its
    limit), so that budget could never hold it, spent or not (retrying is pointless; asking for
    less is not). ``budget_exhausted`` is not set then: the budget is not spent (review R82)."""
    rule: str | None = None
    """The policy rule that allows the call (``role R rule N``), recorded in its audit entries."""
    quota_exceeded: str | None = None
    """Refused because this policy quota's current window is full (its name)."""
    quota_never_fits: bool = False
    """With ``quota_exceeded``: the call alone counts more than the quota's whole limit, so no
    window can ever hold it (retrying is pointless)."""
    unmetered: bool = False
    """Refused because a budget of the chain, or a policy quota, cannot meter the call (a budget
    in a unit agentgate does not charge; a budget or quota in tokens or money, for a model call
    without its token estimate): the Gate fails closed, and retrying is pointless. Until review
    R93 nothing told this refusal from a used approval's, which the gateway answered it as."""
    once_key: str | None = None
    """For an allowed call of a non-idempotent tool with a call id: its idempotency key, under
    which the Gate records that it ran (``store.once``), so that it never runs twice. For such a
    call refused because it already ran to completion: that key too (an integration that kept
    the call's answer gives it again)."""
    output_tokens: int | None = None
    """For an allowed model call decided with its token estimate: the output tokens reserved (its
    ``max_tokens``), the most completion tokens its outcome is charged."""
    prompt_tokens: int | None = None
    """For an allowed model call whose decider bounds its prompt (one token a byte of what it
    sends plus allowances, ``dispatch.prefix.prompt_tokens_most``: the gateway of a request body,
    the LangGraph middleware of a dispatched call's payload, ``Gate.authorize(prompt_most=)``):
    the most prompt tokens its outcome is charged. ``None``: the prompt is charged as reported."""
    call_id: str | None = None
    """The call id it was decided for (``Gate.authorize(call_id=)``), which its approval request
    and its once-only key are bound to: ``Gate.run``/``arun`` refuse another, and trace the call
    as this one when given none (its idempotency key is made of the ids given to them alone)."""
    run_id: str | None = None
    """The run it was decided in (``Gate.authorize(run_id=)``): ``Gate.run``/``arun`` refuse
    another (their idempotency key is scoped to the run given to them, else to the grant)."""
    _use: _Once = field(default_factory=_Once, repr=False, compare=False)
    """Taken by the one ``Gate.run``/``arun``/gateway call an allow is good for (shared by copies)."""
    _asked_again: bool = field(default=False, repr=False, compare=False)
    """An approval request handed out again for the same call (LangGraph re-runs a node when it
    resumes): ``audit_index`` is the entry recorded when it was first asked, which that asking's
    span links, so this one's span links ``_asked_entry`` instead (one span per audited decision)."""
    _asked_entry: int | None = field(default=None, repr=False, compare=False)
    """For a request asked again: the entry this asking recorded itself (an approval given that
    did not count), else ``None``; the one its span links."""

    @property
    def allowed(self) -> bool:
        return self.verdict == Verdict.ALLOW

    @property
    def needs_approval(self) -> bool:
        return self.verdict == Verdict.APPROVAL_REQUIRED

    def __repr__(self) -> str:
        """The verdict, the resource and the audit index, not the call's arguments nor the reasons
        (which may quote them): an application that logs an ``Authorization`` must not write the
        values its policy keeps out of logs (``Gate.explain_redacted`` words a refusal for that)."""
        return (
            f"Authorization(verdict={self.verdict!r}, resource={self.call.resource!r}, "
            f"action={self.call.action!r}, audit_index={self.audit_index!r}, rule={self.rule!r}, "
            f"findings={[f.code for f in self.findings]!r})"
        )

    def approval_payload(self) -> dict[str, Any]:
        """What ``interrupt()`` shows a human: what is asked, by whom, and why."""
        return {"agentgate": "approval_required", "request": dict(self.request or {})}

    def explain(self) -> str:
        """What was decided and why, for the model: the resource and the reasons, never tokens or
        keys. An allow says it was allowed; only a refusal carries advice on what to do next."""
        what = f"{self.call.resource} ({self.call.action})"
        why = "; ".join([*self.reasons, *(f"[{f.kind}/{f.code}]" for f in self.findings)])
        if self.allowed:
            return f"agentgate allowed {what}: {why or 'allowed'}."
        why = why or "not allowed"
        if self.needs_approval:
            return f"agentgate: {what} needs a human approval that was not given: {why}"
        if self.budget_never_fits:
            advice = "Do not retry this call: it alone is more than the budget allows; ask for less or stop."
        elif self.quota_exceeded is not None and self.quota_never_fits:
            advice = "Do not retry this call: it alone is more than the quota allows; ask for less or stop."
        elif self.quota_exceeded is not None:
            advice = "Retry once the quota's window has passed."
        else:
            codes = [f.code for f in self.findings if f.code in _RESIGN]
            advice = _RESIGN[codes[0]] if codes else "Do not retry this call; choose another way or stop."
        return f"agentgate refused {what}: {why}. {advice}"


COVERAGE_CODES = frozenset({"call_not_covered", "ambiguous_resource"})
"""The authority engine's refusals of a call that a valid grant does not cover. The engine checks
coverage before it reads revocation (and stops at the first fault), so a chain refused for one
of these is read for revocation by its caller (``Gate._revoked_instead``)."""


def revoked_refusal(
    decision: Decision, call: Call, identity: AgentIdentity, revoked: set[str], since: str = ""
) -> Authorization:
    """The refusal of ``call`` on ``identity``'s chain, which holds a revoked grant (``revoked``:
    the revoked ids), with its finding ``revoked_finding`` (the authority engine's wording)."""
    finding = revoked_finding(identity.chain.ids, revoked, since=since)
    return Authorization(Verdict.DENY, call, identity, (finding.message,), (finding,), decision=decision)


_RESIGN = {
    "invocation_expired": "Sign the call again with a fresh invocation.",
    "invocation_not_yet_valid": "Check the signer's clock and sign the call again.",
    "replayed_invocation": "Each invocation is used once: sign the call again with a fresh one.",
}
"""Refusals that a freshly signed invocation of the same call can overcome, and what to do."""
