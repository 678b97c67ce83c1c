"""How the ``Gate`` asks for approvals and uses them (``_Approvals``); the signed approval itself
is ``_approval.Approval``."""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Tracer

from agentgate._time import unix, when
from agentgate.audit.entry import argument_digest, redact
from agentgate.audit.spans import approval_span
from agentgate.authority import ApprovalRequirement, Chain
from agentgate.capabilities import Call
from agentgate.errors import AuthorityError, Denied, Expired, InputError, Revoked
from agentgate.gate._approval import Approval, approval_call_hash, approval_call_key
from agentgate.gate._authorization import AgentIdentity, Authorization, Verdict, expect
from agentgate.gate._checks import _AUTHORIZATION
from agentgate.gate._delegation import DELEGATIONS_PURGE_S
from agentgate.gate._lock import _serialized
from agentgate.gate._records import (
    ASKED_FIELDS,
    quorum_tally,
    recordable,
    untallied,
    voided_request_entry,
    voided_request_reason,
)
from agentgate.keys import SigningKey
from agentgate.policy import ApprovalRequirement as PolicyApproval
from agentgate.policy import Outcome, Policy, PolicyDecision, PolicyIndex
from agentgate.store import Store, Transaction
from agentgate.store.approvals import REFUSED, ApprovalStore, QuorumRule, how_closed
from agentgate.store.approvals import Approval as StoredRequest
from agentgate.store.audit import AuditLog
from agentgate.store.grants import GrantRepository
from agentgate.store.once import RUN_AGAIN, OnceCalls

OPEN_REQUESTS_KEPT = 4096
"""How many approval requests asked in this process a Gate keeps the audit index of, for the
``approval_given`` entry of their answer (``Gate._open_requests``); past it the oldest asked leave,
and the answer to one of those reads its index from the store, as an answer to a request another
process asked does. Until review R59 every request nobody answered was kept until it expired:
about 370 bytes each, so a policy's ``expiry_s`` of a day at ten unanswered requests a second
held about 300 MiB."""


class _Approvals:
    """The ``Gate``'s approval requests: the request a call that needs an approval records (one
    per call until it is answered or expires; closed when the call is refused, or asked for again
    in another version of the answer that asked for it), the votes that complete a quorum, the
    approval an allowed call consumes (put back when the call pauses or does not start), and
    ``approve``/``decline``."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    index: PolicyIndex
    store: Store
    audit: AuditLog
    approvals: ApprovalStore
    once: OnceCalls
    _store_lock: threading.RLock
    _lock: threading.Lock
    _open_requests: dict[str, tuple[str, int | None, float]]
    _requests_purge_at: float
    tracer: Tracer

    if TYPE_CHECKING:  # what this part calls of the gate's other parts

        def _entry(self, auth: Authorization, kind: str) -> dict[str, Any]: ...

        def _loggable(self, call: Call) -> list[str]: ...

        @contextmanager
        def _decision_transaction(self) -> Iterator[Transaction]: ...

        def _refusal_span(self, refused: Authorization, call_id: str | None = None) -> None: ...

        def _after_commit(self, span: Callable[[], None]) -> None: ...

        def _record_chain(self, chain: Chain, tx: Transaction) -> None: ...

        def _seal(self, auth: Authorization, *, kept: bool = False) -> tuple[object, ...]: ...

        def _untraced(self) -> bool: ...

        def _span(self, auth: Authorization, call_id: str | None = None) -> AbstractContextManager[Span]: ...

    def _approval_state(
        self,
        approval: Approval | None,
        request: Mapping[str, Any],
        rule: QuorumRule | None,
        gate: PolicyApproval | None,
        identity: AgentIdentity,
        call_key: str | None = None,
        *,
        refusal: Callable[[Transaction], str | None] | None = None,
    ) -> tuple[Approval | None, tuple[str, ...], ApprovalRequirement | None]:
        """For a call with an approval ``request``: the approval that completes it (``None`` when
        none does), the reasons an approval given was not used, and the approval the call still
        needs (``None`` once approved, or when no policy gate asks for one). ``call_key``: the
        framework call (``_scoped_call_key``), whose run an approval's request must be of.
        ``refusal``: as ``_approval_complete`` takes it."""
        approved, unused = self._approval_complete(approval, request, rule, call_key, refusal=refusal)
        if approved is not None and self._superseded(approved, request, identity, call_key):
            unused = (
                f"approval of request {approved.request} not used: it expired, and the call was asked for again",
            )
            approved = None  # asked for again, under the request that replaced its own
        pending = None
        if approved is None and gate is not None:
            pending = ApprovalRequirement(gate.approvers, gate.quorum, f"approval gate {gate.gate}")
        return approved, unused, pending

    @staticmethod
    def _scoped_call_key(
        identity: AgentIdentity, call_id: str | None, asked_in: tuple[str, str] | None
    ) -> tuple[str, str] | None:
        """The key that names a framework call's approval request, with the version it was asked
        in; ``None`` without a call id and a scope."""
        # Named only within its scope: ids a scripted model reuses in other threads stay apart.
        if call_id and asked_in:
            return approval_call_key(identity.did, asked_in[0], call_id), asked_in[1]
        return None

    @classmethod
    def _call_scope(
        cls, identity: AgentIdentity | None, call_id: str | None, asked_in: tuple[str, str] | None
    ) -> str | None:
        """The key of the framework call (``_scoped_call_key``) without its version: what keeps
        the approval requests of one run's call apart from another run's asking the same call
        (same tool call id, arguments and grant); ``None`` without an identity, a call id and a
        scope."""
        call_key = None if identity is None else cls._scoped_call_key(identity, call_id, asked_in)
        return None if call_key is None else call_key[0]

    def _approval_request(
        self, identity: AgentIdentity, call: Call, verdict: PolicyDecision, call_id: str | None
    ) -> dict[str, Any] | None:
        gate = verdict.approval
        if verdict.outcome is not Outcome.APPROVAL_REQUIRED or gate is None:
            return None
        digest = argument_digest(call.args)
        return {
            "id": "",
            "call_hash": approval_call_hash(
                call.resource, call.action, digest, identity.grant_id, call_id or ""
            ),
            "gate": gate.gate,
            "resource": call.resource,
            "action": call.action,
            "grant": identity.grant_id,
            "call_id": call_id or "",
            "args": redact(call.args, self._loggable(call)),
            "args_digest": digest,
            "requester": identity.name,
            "requester_did": identity.did,
            "approvers": list(gate.approvers),
            "quorum": gate.quorum,
            # Whole seconds rounded up, so it holds ``expiry_s`` at least (until review R82 the
            # asking's second was rounded down: one asked at X.9 with ``expiry_s: 1`` held 0.1 s),
            # and never past the chain's earliest expiry: the call hash binds the grant, no call
            # is made on an expired one, so no approval of the request could be used after it.
            # Until review R96 a sub-agent's request outlived its delegated grant: resumed after
            # it, the delegation issued a fresh grant, the call was asked for again under a new
            # request, and the old one stayed pending, listed and signable, until ``expiry_s``.
            "expires_at": min(math.ceil(time.time()) + gate.expiry_s, identity.chain.expires),
            "reasons": list(verdict.reasons),
        }

    @staticmethod
    def _quorum_rule(gate: PolicyApproval | None, requester_did: str) -> QuorumRule | None:
        """The quorum of the policy's approval gate now and the DIDs of the approvers it names,
        less ``requester_did``: an approver name sharing the requester's key never signs for its
        call (``_signer_refusal``), and until review R74's review that key was stored among the
        request's counted approvers (``approval_counted``), which ``agentgate approval list``
        shows without the policy."""
        if gate is None:
            return None
        return QuorumRule(gate.quorum, frozenset(did for did in gate.approver_dids if did) - {requester_did})

    def _approval_invalid(
        self,
        approval: Approval,
        request: Mapping[str, Any],
        rule: QuorumRule,
        call_key: str | None = None,
        tx: Transaction | None = None,
    ) -> str | None:
        """Why ``approval`` cannot count for ``request`` under ``rule``, or ``None`` when it can.
        ``call_key``: the framework call asking (``_scoped_call_key``); an approval of a request
        keyed to another (the same call hash asked in another LangGraph thread) is that run's,
        whatever became of it: a resumed node replays the answers it was given in order, so an
        approval not counted once must not count later (once its own run used it, say).

        The store's request of the approval's id must be for this call too: the signature covers
        the call hash, not the id. Until review R93 an approval whose id was changed on its way to
        another pending request's reached the vote, which re-tallied that request under this
        call's rule (its quorum, voters and state) before refusing it, and the change committed.
        A request the store does not hold is refused where the approval is used (``consume``).
        ``tx``: the transaction the caller is in, read in (none opened inside it: on PostgreSQL a
        second pool connection, which a pool of one never gives)."""
        asked = self.approvals.call_of(approval.request, tx=tx)  # its call hash and call key
        if approval.call_hash != request["call_hash"]:
            if asked == (approval.call_hash, call_key) and call_key is not None:
                return self._other_grant_refusal(approval, tx)
            return "approval not counted: it was given for another call"
        if asked is not None and asked[0] != request["call_hash"]:
            return f"approval not counted: it was given for another call (request {approval.request[:100]!r})"
        if call_key is not None and asked is not None and asked[1] not in (None, call_key):
            # Until review R55 two threads asking the same call shared one request: an approval
            # shown in one thread's interrupt ran the call in the other.
            return "approval not counted: it was given for this call in another run (another thread)"
        signer = self._signer_refusal(approval.approver, request["requester_did"], rule.voters)
        if signer is not None:
            return f"approval not counted: {signer}"
        if not approval.verify():
            return f"approval not counted: its signature is not {approval.approver}'s"
        return None

    def _other_grant_refusal(self, approval: Approval, tx: Transaction | None) -> str:
        """Why ``approval``, of a request asked for this very framework call (its call key) under
        another call hash, is not counted: the grant the call stood on expired, and with it the
        request (it lasts no longer than its chain), and the call now stands on a fresh grant (a
        sub-agent's delegation issues one in place of an expired one); else the call was changed.
        Until review R96 both read "given for another call". ``tx``: as ``_refusal``'s."""
        try:
            own = self.approvals.get(approval.request, tx=tx)
        except InputError:  # gone meanwhile
            own = None
        if own is not None and own.state != "consumed" and own.expires_at <= time.time():
            return (
                f"approval not counted: request {approval.request[:100]!r} expired before the call was "
                "made (a request lasts no longer than the grant it was asked under); the call is asked "
                "for again"
            )
        return "approval not counted: it was given for another call"

    @staticmethod
    def _signer_refusal(approver: str, requester_did: object, voters: Collection[str] | None) -> str | None:
        """Why a yes signed by ``approver`` never counts for a call asked by ``requester_did`` whose
        approvers' DIDs are ``voters`` (``None``: not known), or ``None``: the rule the resumed run
        applies (``_approval_invalid``) and ``approve`` applies before it signs."""
        # The requester first: the policy takes the requester off the approvers, and a self-signed
        # approval said only "not one of this call's approvers", hiding what was tried.
        if approver == requester_did:
            return "the approver must not be the requester"
        if voters is not None and approver not in voters:
            return "its approver is not one of this call's approvers"
        return None

    def _refused_approval(
        self,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        rule: QuorumRule | None,
        call_key: str | None = None,
        tx: Transaction | None = None,
    ) -> bool:
        """Whether ``approval`` is one no approver of ``rule`` gave for ``request``'s call
        (``_approval_invalid``, read in ``tx``): another call's, a key the gate does not list, the
        requester's own, a bad signature. Not an approval given and no longer usable (a repeated
        yes, one that expired), which a run replays when it resumes."""
        if approval is None or request is None or rule is None:
            return False
        return self._approval_invalid(approval, request, rule, call_key, tx) is not None

    def _superseded(
        self,
        approval: Approval,
        request: Mapping[str, Any],
        identity: AgentIdentity,
        call_key: str | None = None,
    ) -> bool:
        """Whether the call was asked for again under a newer request than ``approval``'s, one
        still open, because its own expired unused. A LangGraph run resumed with that approval first
        decides without it (the node runs again), which opens the new request; refusing the old
        approval then would leave the new request pending, shown to approvers and never answered
        in the log. It is asked for instead, as an approval that does not hold is."""
        found = self.approvals.open_for(request["call_hash"], identity.did, call_key=call_key)
        if found is None or found[0] == approval.request:
            return False
        try:
            own = self.approvals.get(approval.request)
        except InputError:  # no such request: refused as one that names none
            return False
        # Expired, not used: an approval already used is refused, even with a newer request open.
        return own.state != "consumed" and own.expires_at <= time.time()

    def _approval_complete(
        self,
        approval: Approval | None,
        request: Mapping[str, Any],
        rule: QuorumRule | None,
        call_key: str | None = None,
        *,
        refusal: Callable[[Transaction], str | None] | None = None,
    ) -> tuple[Approval | None, tuple[str, ...]]:
        """The approval that completes the gate's quorum, or ``None`` while it is not complete,
        and why the approval given did not count (a reason for the ``approval_required`` answer
        and its entry: an approver told nothing would sign again and again).

        A quorum of one is decided with the call, in the decision's transaction. Above one, each
        valid approval is recorded at once as one approver's vote (``store.approvals``; an
        approver counts once), and the call is approved when the votes reach the quorum; until
        then it stays ``approval_required`` and the run asks the next approver. The quorum and
        the approvers who count are the policy's now (``rule``), also for a request asked under
        an earlier version of it.

        ``refusal``: asked in the vote's transaction before the vote, why the authority refuses
        the call (``None``: it does not); a call it refuses has no vote recorded, and the decision
        that follows refuses it. Until review R60 the Gate asked the authority before this
        transaction: a revocation committed between the two had the vote recorded (on a request
        without grant rows, which ``approve`` does not read as void), then the call refused.
        """
        if approval is None or rule is None:
            return None, ()
        invalid = self._approval_invalid(approval, request, rule, call_key)
        if invalid is not None:
            return None, (invalid,)
        if rule.quorum == 1:
            return approval, ()
        unused: tuple[str, ...] = ()
        with self._decision_transaction() as tx:
            refused = refusal(tx) if refusal is not None else None
            if refused is not None:
                return None, (f"approval by {approval.approver} not counted: {refused:.300}",)
            try:
                self.approvals.approve(
                    approval.request, approval.approver, call_hash=request["call_hash"], tx=tx, rule=rule
                )
            except (Denied, Expired, Revoked, InputError) as exc:
                # A repeated, late, void or misdirected vote adds nothing; the count below decides.
                unused = (f"approval by {approval.approver} not counted: {exc!s:.300}",)
            else:
                given = self._write_approval_given(
                    approval, request, self._asked_index(approval, request, tx), tx
                )
                self._after_commit(functools.partial(self._approval_given_span, approval, request, given))
            votes = self.approvals.approvers(approval.request, tx=tx, rule=rule)
        return (approval, ()) if len(votes) >= rule.quorum else (None, unused)

    def _keep_open_request(self, request_id: str, asked: tuple[str, int | None, float]) -> None:
        """Keep ``asked`` (call hash, audit index, expiry) for ``request_id``, as the newest, within
        ``OPEN_REQUESTS_KEPT``: the oldest kept leave first. A cache only: ``_asked_index`` reads
        from the store what is not kept here. The caller holds ``_lock``."""
        kept = self._open_requests
        kept.pop(request_id, None)
        while len(kept) >= OPEN_REQUESTS_KEPT:
            del kept[next(iter(kept))]
        kept[request_id] = asked

    def _asked_index(self, approval: Approval, request: Mapping[str, Any], tx: Transaction) -> int | None:
        """The index of the ``approval_required`` entry of the request ``approval`` answers: known
        here when this process asked that very request, else read from the store (another
        process sharing it asked, or this one before a restart)."""
        with self._lock:
            asked = self._open_requests.get(approval.request)
        if asked is not None and asked[0] == request["call_hash"]:
            return asked[1]
        return self.approvals.asked_index(approval.request, request["call_hash"], tx=tx)

    def _write_approval_given(
        self, approval: Approval, request: Mapping[str, Any], asked_index: int | None, tx: Transaction
    ) -> int:
        """Record one approver's counted yes (``approval_given``) in ``tx``, referring to the
        request's ``approval_required`` entry when it is known (``asked_index``); its index. The
        approval's request id, call hash and signature are in ``reasons``, so the log alone shows
        that the approver signed this very call (docs/audit-format.md). Its span is the caller's
        to make once ``tx`` commits (``_approval_given_span``)."""
        return self.audit.append(
            {
                "kind": "approval_given",
                "principal": approval.approver,
                "chain_hash": request["grant"],
                "policy_hash": self.policy.digest or None,
                "resource": recordable(request["resource"]),
                "args_digest": request["args_digest"],
                "args": request["args"],
                "approver": approval.approver,
                "ref": asked_index,
                "reasons": [
                    f"request:{recordable(approval.request)}",
                    f"call_hash:{recordable(approval.call_hash)}",
                    f"signature:{approval.signature.hex()}",
                ],
            },
            tx,
        )

    def _approval_given_span(self, approval: Approval, request: Mapping[str, Any], index: int) -> None:
        """The span of the ``approval_given`` entry at ``index``: an act of authority, as a
        revocation, linked by a span of its own (until review R54 none linked it)."""
        if self._untraced():
            return
        resource = recordable(request["resource"])
        with approval_span(
            resource, approval.approver, approval.request, audit_index=index, tracer=self.tracer
        ):
            pass

    @_serialized
    def approve(self, payload: Mapping[str, Any], approver: SigningKey) -> dict[str, str]:
        """Convenience for a human's tool: sign the request in ``payload``; the resume value.

        ``InputError`` for a ``payload`` that carries no request, an ``approver`` that is not a
        ``SigningKey`` (``Approval.sign``), and, signing nothing, for an approval this Gate can
        tell would never count when the run resumes (``_unusable``): ``approver`` is the
        requester (the payload's or the store's), or none of the approvers of the policy's gates
        on the call (this Gate's policy, which the resumed run applies, not the list the payload
        shows; a key that a gate always applying to the call does not name is none: review R74),
        or the policy's gates leave fewer keys than their quorum (``_no_quorum``: no approval can
        count, and the resumed run refuses the call; since review R74); or the store holds no
        request of the payload's id, holds it for another call, or
        closed it (declined, void, superseded); or the request was used (single use), expired
        (the store's rule: it counts while ``expires_at > now``; the message says to invoke the
        run again without a resume value, with its config and context: until review R72's second
        reading it left the context out, and the gated agent so invoked carries no identity and
        refuses the call; so invoked it asks for the call under a new request; one that expired
        with the grant chain it was asked under says the call needs a new grant first: since
        review R96's regression review), or
        ``approver``'s yes is counted on it already while the votes that count are fewer than
        the policy's quorum (a quorum counts each approver once; the message names who may still
        sign). Until review R71 such an approval was signed and
        refused only in the resumed run's next interrupt; until review R72 an expired or used
        request and a repeated yes were still signed. ``Approval.sign`` signs without these checks.
        """
        approval = Approval.sign(payload, approver)
        refusal = self._unusable(approval, payload.get("request", payload))
        if refusal is not None:
            raise InputError(f"approval request {approval.request[:100]!r}: {refusal}; not signed")
        return approval.to_dict()

    def _unusable(self, approval: Approval, request: Mapping[str, Any]) -> str | None:
        """Why ``approval`` of ``request`` (a payload's, checked by ``Approval.sign``) can never
        count when the run resumes, as far as the store and the policy now tell, or ``None``.
        The store's request is the word on who asked and for which call (its call hash binds the
        payload's grant); the rule on the key is the resumed run's (``_signer_refusal``), with
        the keys that may sign under the policy's gates on the call's resource (``_may_sign``:
        those of every gate that always applies, within those of any gate that may) less the
        requester and the holders above it in its chain, whom the policy leaves out too. When
        those keys are fewer than the quorum such a gate asks (a policy changed while the
        request waited: an approver removed, left without a key, or now the requester's), no
        approval can count, and the resumed run refuses the call (``_no_quorum``); then what
        became of the request (``_spent``). Until review R74 the keys were those of any gate on
        the resource, and a key only one of two gates names, or any yes under a policy that left
        too few keys, was signed and not counted when the run resumed."""
        try:
            asked = self.approvals.get(approval.request)
        except InputError:
            return (
                "this Gate's store holds no approval request of this id (its id changed on its way, "
                "or this Gate is on another store than the run that asked)"
            )
        if asked.call_hash != approval.call_hash:
            return "the store's request of this id was asked for another call than the payload shows"
        above, revoked, chain_expires = self._chain_above(request["grant"])
        if revoked is not None:
            return (
                f"the request is void (grant {revoked[:100]!r} of its call was revoked): nothing waits for it"
            )
        gates = self.index.approval_gates(request["resource"])
        voters = _may_sign(gates, {asked.requester, *above})
        # Only of a request still waiting: a closed or used one says so below.
        waiting = asked.state in ("pending", "approved")
        short = _no_quorum(gates, voters, request["resource"]) if waiting else None
        if short is not None:
            return short
        signer = self._signer_refusal(approval.approver, asked.requester, voters)
        if signer is not None:
            return (
                f"{signer} (the key of {approval.approver}): sign with the key of one of the "
                f"approvers of {request['resource'][:200]} under this Gate's policy, other than the "
                f"requester and the holders above it ({', '.join(_named(gates, voters or ())) or 'none'})"
            )
        closed = how_closed(asked)
        if closed is not None:
            return f"the request {closed}"
        return self._spent(approval, asked, gates, voters, chain_expires)

    def _spent(
        self,
        approval: Approval,
        asked: StoredRequest,
        gates: Sequence[PolicyApproval],
        voters: Collection[str] | None,
        chain_expires: float | None,
    ) -> str | None:
        """Why ``approval`` of the open request ``asked`` never counts though its signer may sign
        it (``_unusable``), or ``None``: the request was used, its deadline passed, or the signer's
        yes is counted already. None of these can be undone (an expiry is not moved, a used request
        is put back only for the call that used it, replaying the approvals it was given, and a
        vote is cleared only then), so no approval refused here would have counted later. A
        repeated yes is refused only while the votes of ``voters`` (the keys that may sign, as
        the resumed run counts them) are fewer than the least quorum the call needs
        (``_least_quorum``): a policy that lowered the quorum to the votes in makes any
        approver's yes, a repeated one too, use the request (``_consume_approval``). Until review
        R72's second reading that yes was refused, and the message counted a vote of a key the
        policy no longer lists, against the quorum the request was last counted under.
        ``chain_expires``: the earliest expiry of the grant chain the request was asked under, as
        the store records it (``None``: not known); a request expired with it is not told that
        invoking the run again asks for its call under a new request, which a supervisor on its
        own expired grant never does (the run is refused ``grant_expired``): since review R96's
        regression review the message says a new grant is needed first."""
        if asked.state == "consumed":
            return (
                "the request was already used: an approval is single use, and the store consumed this "
                "one when its call was allowed; nothing waits for another yes (a call that paused "
                "counts again the approvals it was given; a call made again is a new request: sign that one)"
            )
        if asked.expires_at <= time.time():  # the store's rule: a request counts while expires_at > now
            if chain_expires is not None and chain_expires <= time.time():  # whichever came first
                return (
                    f"the request expired at {when(int(asked.expires_at))}, and so has the grant chain "
                    "it was asked under (a request lasts no longer than its grant): a late yes never counts; "
                    "the call can be made again only under a new grant (its issuer issues one; a "
                    "sub-agent's delegation issues one when the run is invoked again without a resume "
                    "value, with its config and context), and it is then asked for under a new "
                    "request: sign that one"
                )
            return (
                f"the request expired at {when(int(asked.expires_at))}: a late yes never counts; "
                "invoke the run again without a resume value, with its config and context "
                "(graph.invoke(None, config, context=identity)), or make the call again, and its "
                "call is asked for under a new request: sign that one"
            )
        votes = self.approvals.approvers(approval.request)
        counted = [vote for vote in votes if voters is None or vote in voters]
        quorum = _least_quorum(gates, asked.quorum)
        if approval.approver in votes and len(counted) < quorum:
            others = _named(gates, set(voters or ()) - set(votes))
            return (
                f"{approval.approver} has already approved this request ({len(counted)} of "
                f"{quorum} votes in): a quorum counts each approver once; another of its "
                f"approvers must sign ({', '.join(others) or 'none left'})"
            )
        return None

    def _chain_above(self, grant_id: str) -> tuple[list[str], str | None, float | None]:
        """The holders of the grants above ``grant_id`` in its chain, as the store records it (the
        Gate records a call's chain with its approval request), a revoked grant of the
        chain (``None``: none is) and the chain's earliest expiry (``None``: no link records
        one). Revocation is for good, so a void request never counts."""
        above: list[str] = []
        revoked = None
        expires: float | None = None
        for row in GrantRepository.recorded_chain(self.store, grant_id):
            if row.revoked and revoked is None:
                revoked = row.id
            if row.id != grant_id:
                above.append(row.audience)
            if isinstance(row.expires, (int, float)) and not isinstance(row.expires, bool):
                expires = row.expires if expires is None else min(expires, row.expires)
        return above, revoked, expires

    @_serialized
    def decline(self, auth: Authorization, reason: str = "no approval was given") -> Authorization:
        """Record that the approval ``auth`` asked for was not given; the refusal.

        For an authorization that needs approval and whose request was recorded (``authorize``
        returned it). In one transaction: the request is closed as denied (if it is still
        pending; an expired one is closed as declined too) and a ``deny`` entry refers to the
        ``approval_required`` entry (``ref``), with ``reason``. The same call asked again later
        makes a new request. Raises ``InputError`` for any other authorization, and for a
        request that was decided meanwhile (approved, used, denied): the log already says how it
        ended, and a refusal of it would contradict that; nothing is written then. Also for an
        ``auth`` this Gate's ``authorize`` did not return as it is (built by hand, copied with
        another call, identity, request or decision by ``dataclasses.replace``, or another
        Gate's; sealed as an allow is: until review R88 such a copy closed the real request and
        wrote a ``deny`` of another call), an ``auth`` that is not an ``Authorization`` or a
        ``reason`` that is not text.
        """
        expect(auth, Authorization, "auth", _AUTHORIZATION)
        expect(reason, str, "reason", "text")
        request = auth.request
        if not auth.needs_approval or request is None or "id" not in request or auth.audit_index is None:
            raise InputError("only an authorization waiting for a recorded approval request can be declined")
        if auth._use.sealed != self._seal(auth):
            # Its ``deny`` would record another call (or arguments) than the request it closes.
            raise InputError(
                f"the authorization of {auth.call.resource} waiting for approval request {request['id']} "
                "was not decided by this Gate (built by hand, changed after the decision, or another "
                "Gate's): only one Gate.authorize returned can be declined"
            )
        # The quorum's tally is the waiting answer's, never the log's (``quorum_tally``).
        said = (*untallied(auth.reasons), f"approval declined: {reason}"[:500])
        # Not asked again: the refusal's span links its own ``deny`` (until review R82 an ``auth``
        # asked again, as the LangGraph middleware declines, had it link the asking's entry or none).
        refused = replace(auth, verdict=Verdict.DENY, reasons=said, _asked_again=False, _asked_entry=None)
        with self._decision_transaction() as tx:
            try:
                self.approvals.deny(request["id"], "agentgate:declined", tx=tx)
            except Expired as exc:
                # Nobody answered in time: closed as declined, so a second decline finds it
                # decided (until review R82 it stayed pending, and each decline wrote a ``deny``).
                if not self.approvals.close_expired(request["id"], "agentgate:declined", tx=tx):
                    raise InputError(f"approval request {request['id']} cannot be declined: {exc}") from None
            except Revoked as exc:
                # Its grant was revoked: a void request is declined, and settled as void; one
                # settled already (its call was refused, with a ``deny`` referring to it) was decided.
                if not self.approvals.void(request["id"], tx=tx):
                    raise InputError(f"approval request {request['id']} cannot be declined: {exc}") from None
            except (AuthorityError, InputError) as exc:
                raise InputError(f"approval request {request['id']} cannot be declined: {exc}") from None
            index = self.audit.append({**self._entry(refused, "deny"), "ref": auth.audit_index}, tx)
        with self._lock:
            self._open_requests.pop(request["id"], None)
        refused = replace(refused, audit_index=index)
        # Named by its tool call id, as the call's other spans are (until review R82 it was not).
        call_id = request.get("call_id")
        self._refusal_span(refused, call_id if isinstance(call_id, str) and call_id else None)
        return refused

    def _close_asked(
        self, refused: Authorization, call_id: str | None, tx: Transaction, call_key: str | None = None
    ) -> int | None:
        """Close (deny) the approval request still open for the tool call that ``refused``
        refuses, if one was asked: a run paused for an approval and resumed after the policy
        changed is refused outright, and the request would stay pending, listed and never answered
        in the log. Returns the index of its ``approval_required`` entry, which the refusal then
        refers to (as a declined request's does); ``None`` when no request is open. A request
        made void by a revocation (the usual reason for the refusal: its call's grant was revoked
        while the run waited) is not open, but it is closed too, as denied by ``agentgate:revoked``
        (``ApprovalStore.void_for``), and referred to: until review R55 it stayed ``pending`` in
        the table, and the refusal referred to nothing. ``call_key``: the framework call refused
        (``_scoped_call_key``); only its own requests are closed, never another run's.

        An open request is closed only for a tool call with an id, and so is one that expired
        while still open (denied by ``agentgate:refused``, ``ApprovalStore.close_expired_for``: a
        request lasts no longer than its grant chain; since review R96's regression review). A
        void one is closed for any call refused as revoked (one without an id, a model call, a GPU
        lease): no caller can use it any more, and until review R56 such a request stayed
        ``pending`` for good when the revocation was written straight into the store. Other
        refusals of those calls read nothing.

        A tool call refused with its ``call_key`` also closes the requests still open for that
        framework call under other arguments or another tool, asked before its answer was edited
        into the call refused now (``_close_changed``; since review R61)."""
        identity = refused.identity
        if identity is None:
            return None
        tool_call = bool(call_id) and refused.call.resource.startswith("tool:")
        if not tool_call and not any(finding.code == "revoked" for finding in refused.findings):
            return None
        ref = self._close_refused(refused, identity, call_id if tool_call else None, tx, call_key)
        if tool_call and call_id and call_key is not None:
            self._close_changed(call_key, call_id, refused.call.action, tx)
        return ref

    def _close_refused(
        self,
        refused: Authorization,
        identity: AgentIdentity,
        call_id: str | None,
        tx: Transaction,
        call_key: str | None,
    ) -> int | None:
        """``_close_asked`` of the request for the very call refused (``call_id``: ``None`` but
        for a tool call with an id); the index of its ``approval_required`` entry, or ``None``.
        A call without a hash (arguments without a canonical form, a resource that is not valid
        Unicode: a model's tool call named with a lone surrogate) was never asked about, and has
        no request to close: until review R67 such a resource raised ``InputError`` out of the
        refusal of a tool call with an id, which was then neither recorded nor traced."""
        tool_call = call_id is not None
        call = refused.call
        try:
            digest = argument_digest(call.args)
            call_hash = approval_call_hash(
                call.resource, call.action, digest, identity.grant_id, call_id or ""
            )
        except InputError:
            return None
        known = (
            self.approvals.open_for(call_hash, identity.did, call_key=call_key, tx=tx) if tool_call else None
        )
        if known is None:
            void = self.approvals.void_for(call_hash, identity.did, call_key=call_key, tx=tx)
            if void is None and tool_call:
                # Expired while the run waited: a request lasts no longer than its grant chain, so
                # a call refused because its own grant expired finds its request expired too.
                # Until review R96's regression review it stayed ``pending`` for good, and the
                # refusal referred to nothing.
                void = self.approvals.close_expired_for(
                    call_hash, identity.did, REFUSED, call_key=call_key, tx=tx
                )
            if void is None:
                return None
            with self._lock:
                self._open_requests.pop(void[0], None)
            return void[1]
        with contextlib.suppress(Denied, Expired, Revoked, InputError):  # decided meanwhile
            self.approvals.deny(known[0], REFUSED, tx=tx)
        with self._lock:
            self._open_requests.pop(known[0], None)
        return known[1]

    def _record_approval_request(
        self,
        auth: Authorization,
        request: Mapping[str, Any] | None,
        rule: QuorumRule | None,
        tx: Transaction | None = None,
        call_key: tuple[str, str] | None = None,
        *,
        uncounted: bool = False,
    ) -> Authorization:
        """Record that ``auth`` waits for an approval: the request open for its call, or a new
        one with its ``approval_required`` entry. A new request for a framework call
        (``call_key``, see ``_call_key``) closes the requests open for the same call under other
        arguments or another tool (``_supersede``). ``uncounted``: ``auth`` was presented with an
        approval that no approver gave for its call (``_refused_approval``; its reasons say why);
        on a request already open that is an ``approval_required`` entry of its own, referring to
        the request's."""
        assert request is not None and auth.identity is not None
        call_hash = request["call_hash"]
        # The store says which request is open, never this process's memory: another process
        # sharing it may have declined or used the request asked here (handing it out again
        # would ask approvers for an approval that can never be used), or asked first; and this
        # one may have asked before a restart (a run resumed from its checkpoint asks again
        # before its approval is read). The same open request is the same request.
        asked: int | None = None  # the entry this asking records itself, if any
        with self._decision_transaction() if tx is None else nullcontext(tx) as t:
            known = self.approvals.open_for(
                call_hash, auth.identity.did, call_key=None if call_key is None else call_key[0], tx=t
            )
            if known is not None and call_key is not None:  # asked by an earlier version: keyed now
                self.approvals.keep_call(known[0], call_key, tx=t)
            if known is not None and uncounted:
                # A forged, self-signed or misdirected approval is evidence too: without this
                # entry only the answer said it was refused, and the log showed nothing.
                asked = self.audit.append({**self._entry(auth, "approval_required"), "ref": known[1]}, t)
        if known is not None:
            with self._lock:
                self._keep_open_request(known[0], (call_hash, known[1], known[2]))
        if known is not None:
            # The same call asked again (LangGraph re-runs a node when it resumes): one request,
            # one audit entry, until it is answered or expires.
            votes = (
                list(self.approvals.approvers(known[0], tx=tx, rule=rule)) if request["quorum"] > 1 else []
            )
            return self._sealed_asking(
                replace(
                    auth,
                    reasons=_tallied(auth.reasons, len(votes), request["quorum"]),
                    audit_index=known[1],
                    # As the first ask wrote it: an integer (until review R81 the store's float).
                    request={**request, "id": known[0], "expires_at": unix(known[2]), "approved_by": votes},
                    _asked_again=True,
                    _asked_entry=asked,
                )
            )
        with self._decision_transaction() if tx is None else nullcontext(tx) as t:
            request_id = self.approvals.request(
                call_hash,
                auth.identity.did,
                request["expires_at"],
                quorum=request["quorum"],
                grants=auth.identity.chain.ids,
                voters=None if rule is None else rule.voters,
                call_key=call_key,
                tx=t,
            )
            # An approver looks up this entry (``audit explain``): its chain, verified as an
            # allow's is, is named link by link wherever it was made, as an allow's is.
            self._record_chain(auth.identity.chain, t)
            index = self.audit.append(self._entry(auth, "approval_required"), t)
            self.approvals.asked(request_id, index, tx=t)
            if call_key is not None:
                self._supersede(call_key, request, request_id, t)
        with self._lock:
            now = time.time()
            if now >= self._requests_purge_at:
                # Requests nobody answered (their runs abandoned) leave once expired, in one pass
                # at most every DELEGATIONS_PURGE_S: a service's memory does not grow per request.
                self._open_requests = {i: r for i, r in self._open_requests.items() if r[2] > now}
                self._requests_purge_at = now + DELEGATIONS_PURGE_S
            self._keep_open_request(request_id, (call_hash, index, float(request["expires_at"])))
        return self._sealed_asking(
            replace(
                auth,
                reasons=_tallied(auth.reasons, 0, request["quorum"]),
                audit_index=index,
                request={**request, "id": request_id, "approved_by": []},
            )
        )

    def _sealed_asking(self, asking: Authorization) -> Authorization:
        """``asking``, an authorization that waits for its recorded approval request, sealed as an
        allow is (``_seal``): ``decline`` refuses a copy with another call, identity, request or
        decision, whose ``deny`` would name a call other than the request's (review R88)."""
        asking._use.sealed = self._seal(asking, kept=True)
        return asking

    def _supersede(
        self, call_key: tuple[str, str], request: Mapping[str, Any], request_id: str, tx: Transaction
    ) -> None:
        """Close the requests still open for the framework call ``call_key`` that were asked in
        another version of the answer that asked for it: the answer was edited in the run's state
        (LangGraph ``update_state``) before the call was asked for again, so no run will make the
        call they name, and they would stay listed to approvers until they expire (review R40);
        and those of the call that expired while still open, whatever version asked them
        (``ApprovalStore.supersede_expired``: since review R96's regression review, below).
        Each is closed as denied, and a ``deny`` entry of the call it named refers to its
        ``approval_required`` entry, as a declined request's does; once ``tx`` commits, each
        such entry has its refusal span (``_superseded_span``)."""
        for old_id, _, asked_index in self.approvals.supersede(call_key, tx=tx):
            reason = (
                f"approval request {old_id} superseded by request {request_id}: tool call "
                f"{request['call_id']!r} was changed and asked for again"
            )
            self._answer_superseded(old_id, asked_index, reason, request["action"], request["call_id"], tx)
        # The call's requests that expired unanswered (by ``expiry_s``, or with the grant chain
        # they were asked under: a sub-agent's call resumed after its delegated grant expired is
        # asked for again under a fresh grant) are answered too: until review R96's regression
        # review they stayed ``pending`` for good, their ``approval_required`` entries unanswered.
        for old_id, _, asked_index in self.approvals.supersede_expired(call_key[0], tx=tx):
            reason = (
                f"approval request {old_id} superseded by request {request_id}: it expired before "
                f"tool call {request['call_id']!r} was made, and the call was asked for again"
            )
            self._answer_superseded(old_id, asked_index, reason, request["action"], request["call_id"], tx)

    def _close_changed(self, call_key: str, call_id: str, action: str, tx: Transaction) -> None:
        """Close the requests still open for the framework call ``call_key``, refused as it stands
        now (``ApprovalStore.close_call``): each as a superseded request is (``_supersede``). An
        edit that the policy or the grant refuses (an amount of the wrong type, a path outside the
        grant) is refused before anyone is asked, so no new request closed the old ones: until
        review R61 they stayed pending, listed to approvers, their entries never answered."""
        for old_id, _, asked_index in self.approvals.close_call(call_key, tx=tx):
            reason = f"approval request {old_id} superseded: tool call {call_id!r} was changed and refused"
            self._answer_superseded(old_id, asked_index, reason, action, call_id, tx)

    def _answer_superseded(
        self, old_id: str, asked_index: int | None, reason: str, action: str, call_id: str, tx: Transaction
    ) -> None:
        """The ``deny`` entry, for ``reason``, of the call request ``old_id`` (closed as superseded)
        named, referring to its ``approval_required`` entry at ``asked_index`` (none when it was
        not recorded); once ``tx`` commits, its refusal span (``_superseded_span``)."""
        with self._lock:
            self._open_requests.pop(old_id, None)
        if asked_index is None:
            return
        asked = self.audit.entry(asked_index, tx)
        index = self.audit.append(
            {
                **{name: getattr(asked, name) for name in ASKED_FIELDS},
                "kind": "deny",
                "policy_hash": self.policy.digest or None,
                "reasons": [recordable(reason)],
                "ref": asked_index,
            },
            tx,
        )
        superseded = Call(asked.resource or "", action, {})
        self._after_commit(
            functools.partial(
                self._superseded_span, superseded, asked.chain_hash, index, reason, call_id or None
            )
        )

    def _void_revoked(self, grant_ids: Collection[str], tx: Transaction) -> None:
        """Close the approval requests that revoking ``grant_ids`` in ``tx`` makes void (of those
        grants and of every grant below them: ``ApprovalStore.void_standing_on``), as denied by
        ``agentgate:revoked``, each with a ``deny`` entry of the call it named referring to its
        ``approval_required`` entry (``voided_request_entry``), as a superseded request's; once
        ``tx`` commits, each such entry has its refusal span. Until review R55 a void request was
        closed only when its call was refused on resume: a run never resumed left it ``pending``
        and its ``approval_required`` entry unanswered."""
        closed = self.approvals.void_standing_on(grant_ids, tx=tx)
        if not closed:
            return
        with self._lock:
            for approval_id, _, _ in closed:
                self._open_requests.pop(approval_id, None)
        for approval_id, grant_id, asked_index in closed:
            if asked_index is None:
                continue
            asked = self.audit.entry(asked_index, tx)
            reason = voided_request_reason(approval_id, grant_id)
            index = self.audit.append(
                voided_request_entry(asked, asked_index, reason, self.policy.digest or None), tx
            )
            resource = asked.resource or ""
            # The entry keeps no action; a span names one only for a resource neither a tool's nor a model's.
            voided = Call(resource, "generate" if resource.startswith("model:") else "invoke", {})
            self._after_commit(
                functools.partial(self._superseded_span, voided, asked.chain_hash, index, reason, None)
            )

    def _superseded_span(
        self, call: Call, grant: str | None, index: int, reason: str, call_id: str | None
    ) -> None:
        """The refusal span of a superseded request's ``deny`` entry at ``index``: the span of a
        refused ``call`` (until review R54 it had none, and refusals counted by span missed it),
        its grant the one the request was asked under (``grant``, the entry's ``chain_hash``)."""
        refused = Authorization(Verdict.DENY, call, None, (reason,), audit_index=index)
        with self._span(refused, call_id) as span:
            if grant is not None and span.is_recording():
                span.set_attribute("agentgate.capability.id", grant)

    def _consume_approval(
        self,
        auth: Authorization,
        approval: Approval,
        request: Mapping[str, Any],
        rule: QuorumRule | None,
        tx: Transaction,
    ) -> tuple[Authorization, int | None]:
        """Use ``approval`` up for the call ``auth`` allows, in ``tx``: its vote counted (a quorum
        of one), the request closed and, for a vote counted now, its ``approval_given`` entry.
        Returns ``auth`` naming the approvers and the request, and the index of the
        ``approval_given`` entry written (``None``: none was), whose span is the caller's to
        make once the allow holds and ``tx`` commits. Raises what ``approve`` and
        ``consume`` raise (``Denied``, ``Expired``, ...) for an approval that does not hold."""
        voted = request["quorum"] == 1  # a larger quorum's votes were recorded as they came
        if voted:
            try:
                self.approvals.approve(approval.request, approval.approver, tx=tx, rule=rule)
            except Denied:
                # This approver's vote is in already (given under a larger quorum, which
                # the policy has since lowered): ``consume`` decides whether it holds.
                voted = False
        approvers = self.approvals.consume(approval.request, request["call_hash"], tx=tx, rule=rule)
        asked_index = self._asked_index(approval, request, tx)
        with self._lock:
            self._open_requests.pop(approval.request, None)
        given = self._write_approval_given(approval, request, asked_index, tx) if voted else None
        # The request, as a call that pauses before completing re-arms it (``_write_outcome``).
        consumed = replace(
            auth,
            approver=",".join(approvers),
            request={**request, "id": approval.request, "asked_index": asked_index},
        )
        return consumed, given

    def _rearm_approval(self, tx: Transaction, auth: Authorization, status: str, reasons: list[str]) -> None:
        """Open again the approval request an approved call used when the call paused before
        completing or did not start, so that the resumed call asks for the same request."""
        request = auth.request
        if not (
            request and request.get("id") and self.approvals.rearm(request["id"], request["call_hash"], tx=tx)
        ):
            return
        when = "paused before completing" if status == "paused" else "not started"
        reasons.append(f"{when}: approval request {request['id']} is pending again")
        if request.get("asked_index") is not None:  # the resumed call asks for the same request
            with self._lock:
                self._keep_open_request(
                    request["id"],
                    (request["call_hash"], request["asked_index"], float(request["expires_at"])),
                )

    def _ask_again_if_not_run(
        self,
        auth: Authorization,
        exc: Exception,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        rule: QuorumRule | None,
        once_key: str | None,
        tx: Transaction,
    ) -> Authorization | None:
        """``auth`` asking for approval again, in ``tx``, when its allow failed (``exc``) because
        ``approval`` was used already, by an earlier allow of this call, and the call may run
        again: a call that must run once whose record says it did not run (settled by
        hand as not run, ``agentgate tasks settle KEY --not-run``), or a tool the policy marks
        ``idempotent`` asked again in the framework call its approval was given in (a run resumed
        after its process died between the allow and the tool's outcome). ``None`` otherwise: the
        call is refused (``already used``), as any replay of a used approval is.

        A used approval never counts again: presented again it is a replay, whoever presents it.
        Asking again is safe (an approver signs a new approval, which cannot be replayed), where
        refusing left such a call refused for good: until review R61 it could never run again.
        The request asked is the one open for the call (the resumed node opened it, deciding first
        without the approval) or a new one keyed to the same framework call; as for an approval
        that does not count, an ``approval_required`` entry says why."""
        if not isinstance(exc, Denied) or approval is None or request is None:
            return None
        if not self.approvals.used(approval.request, request["call_hash"], tx=tx):
            return None
        asked_call = self.approvals.asked_call(approval.request, tx=tx)
        if once_key is not None:
            last = self.once.last(tx, once_key)
            if last is None or last[0] not in RUN_AGAIN:
                return None
            why = (
                f"approval of request {approval.request} not used: it was used by the allow of this "
                f"call at audit entry {last[1]}, and the call did not run ({last[0]}); a used approval "
                "does not count again, so the call is asked for again"
            )
        else:
            spec = self.policy.document.tools.get(auth.call.resource.removeprefix("tool:"))
            idempotent = auth.call.resource.startswith("tool:") and spec is not None and spec.idempotent
            if not idempotent or asked_call is None:
                return None
            why = (
                f"approval of request {approval.request} not used: it was already used by an earlier "
                "allow of this call; the tool is idempotent and may run again, but a used approval "
                "does not count again, so the call is asked for again"
            )
        asking = replace(auth, verdict=Verdict.APPROVAL_REQUIRED, reasons=(*auth.reasons, why))
        return self._record_approval_request(asking, request, rule, tx, asked_call, uncounted=True)


def _tallied(reasons: tuple[str, ...], given: int, quorum: int) -> tuple[str, ...]:
    """``reasons`` of a call waiting for approval, and, for a quorum above one, how many of its
    approvals are ``given`` (``quorum_tally``), after the entry that records them is written."""
    return reasons if quorum <= 1 else (*reasons, quorum_tally(given, quorum))


def _named(gates: Sequence[PolicyApproval], keys: Collection[str]) -> list[str]:
    """The names of the approvers of ``gates`` whose DIDs are among ``keys``, once each, in the
    policy's order."""
    return list(
        dict.fromkeys(
            name
            for gate in gates
            for name, did in zip(gate.approvers, gate.approver_dids, strict=True)
            if did is not None and did in keys
        )
    )


def _keys_of(gate: PolicyApproval) -> set[str]:
    """The DIDs of ``gate``'s approvers that have one."""
    return {did for did in gate.approver_dids if did is not None}


def _may_sign(gates: Sequence[PolicyApproval], left_out: Collection[str]) -> frozenset[str] | None:
    """The keys whose yes the resumed run may count for a call on a resource that ``gates`` name
    (``PolicyIndex.approval_gates``: every gate on it, whatever its conditions), less
    ``left_out`` (the requester and the holders above it); ``None`` when no gate names it.

    An approval must meet every gate that applies to the call (``_combined_requirement``): a gate
    without conditions applies to every call on the resource, so only keys it names may sign; a
    gate with conditions may or may not apply (the payload need not show every argument), so it
    can only add keys. Never a key less than the resumed run counts."""
    if not gates:
        return None
    may = set().union(*map(_keys_of, gates))
    for gate in _always(gates):
        may &= _keys_of(gate)
    return frozenset(may.difference(left_out))


def _always(gates: Sequence[PolicyApproval]) -> list[PolicyApproval]:
    """The gates of ``gates`` without conditions: those that apply to every call on their resource."""
    return [gate for gate in gates if not gate.conditions]


def _least_quorum(gates: Sequence[PolicyApproval], default: int) -> int:
    """The least quorum a call on a resource that ``gates`` name needs: the largest of the gates
    that always apply (the policy takes the largest quorum of the gates that apply), else the
    smallest of any gate; ``default`` (the request's, as the store last counted it) without
    gates."""
    smallest = min((gate.quorum for gate in gates), default=default)
    return max((gate.quorum for gate in _always(gates)), default=smallest)


def _no_quorum(gates: Sequence[PolicyApproval], voters: Collection[str] | None, resource: str) -> str | None:
    """Why no approval can count for a call on ``resource``, which ``gates`` name, whose keys that
    may sign are ``voters`` (``_may_sign``), or ``None``: fewer keys than the quorum of the gates
    that always apply, which the policy (``_combined_requirement``, ``_signable``) refuses the
    call for when the run resumes, closing its request. The message names ``resource`` (until
    review R74's review it said "every call on it")."""
    always = _always(gates)
    if voters is None or not always:
        return None
    quorum = _least_quorum(gates, 1)
    if len(voters) >= quorum:
        return None
    names = " and ".join(gate.gate for gate in always)
    return (
        f"under this Gate's policy no approval can count: approval gate {names} "
        f"{'applies' if len(always) == 1 else 'apply'} to every call on {resource[:200]}, and the approvers of "
        f"{'it' if len(always) == 1 else 'all of them'} other than the requester and the holders above "
        f"it hold only {len(voters)} distinct key(s) for a quorum of {quorum} "
        f"({', '.join(_named(gates, voters)) or 'none'}); the call is refused when the run resumes, "
        "which closes the request: change the policy, or make the call again"
    )
