"""The gateway's decision for one HTTP call: the Gate's own path, for an invocation signed elsewhere.

``Gate.authorize`` signs the invocation itself with the agent's key, which an in-process agent
holds. A gateway caller holds its key on its side and sends the signed invocation in a header, so
``GatewayGate.authorize_invocation`` takes that invocation and then follows ``Gate.authorize``
with the Gate's own parts: the authority engine (chain, holder binding, signature, digest,
coverage, revocation, nonce), the policy index, and the Gate's recording of the decision (budget
reserved and audit entry appended in one transaction; a refusal audited). It differs in two
things HTTP needs: the authority is checked before the policy (authentication before
authorization, so a caller without valid authority learns nothing about the policy), and each
refusal carries the HTTP status it answers with.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry.trace import Tracer

from agentgate._json import once_each
from agentgate._shown import quoted
from agentgate.audit.spans import ends_held, record_usage
from agentgate.authority import Chain, Decision, Invocation, chain_weight, parse_chain
from agentgate.capabilities import Call
from agentgate.dispatch._sse import _StreamUsage
from agentgate.dispatch.backends import ChatChunk, carries_output
from agentgate.errors import InputError, NoBackend, TokenFormatError, UsageUnreadable
from agentgate.findings import Finding, FindingKind
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate, Verdict
from agentgate.gate._authorization import COVERAGE_CODES, revoked_refusal
from agentgate.gate._dispatching import _Ahead  # one bound, the gate's streams' too
from agentgate.gate._outcomes import USAGE_UNREAD, never_sent
from agentgate.gate._running import _failure_reason
from agentgate.keys import PublicKey, SigningKey
from agentgate.policy import Outcome, Policy, PolicyDecision
from agentgate.store import Store, Transaction
from agentgate.store.approvals import QuorumRule
from agentgate.tasks import SchedulerConfig

APPROVAL_HEADER = "X-Agentgate-Approval"
"""The header that carries a signed approval (compact JSON) for a call behind an approval gate."""
UNVERIFIED_CALLER = "unknown"
"""The ``principal`` of the entry of a call refused before its caller was known: the request
named no readable invocation, or its invocation's signature does not verify (docs/audit-format.md)."""
_log = logging.getLogger("agentgate.dispatch.gateway._app")  # the gateway's one logger (docs/gateway.md)


_one_of_each_key = once_each(
    lambda key: InputError(
        f"the {APPROVAL_HEADER} header gives the key {quoted(key)} twice: send each key once"
    )
)


def _approval(text: str) -> Approval | None:
    """The signed approval in an ``X-Agentgate-Approval`` header; ``None`` when it is not one.
    Raises ``InputError`` naming a key the JSON gives twice in one object: readers differ on which
    value counts (Python's parser keeps the last, a proxy or a log in front may read the first),
    so the approver verified and audited could be another than the one they saw (until review R84
    the last was read)."""
    try:
        value = json.loads(text, object_pairs_hook=_one_of_each_key)
    except (ValueError, RecursionError):
        return None
    return Approval.parse(value) if isinstance(value, dict) else None


@dataclass(frozen=True)
class CallerIdentity(AgentIdentity):
    """A remote caller: the holder of ``chain``, who signed its invocation on its own side.

    ``did`` is the chain's holder (the authority engine has checked the invocation's signer is
    that holder). ``key`` is the gateway's own, required by ``AgentIdentity`` and never used to
    sign for the caller: the gateway never calls ``Gate.authorize`` or ``Gate.delegate`` with it.
    ``signer``: for a refusal whose invocation another key signed (``wrong_holder``: a copied
    chain), that key, which ``did`` then is, and ``name`` and ``tenant`` are its own: the log and
    the span name who made the call, not the victim; for a refusal of an invocation whose
    signature does not verify, ``UNVERIFIED_CALLER``, with ``name`` empty: the key it claims
    proved nothing (until review R56 the log named it, or the chain's holder, and the span the
    holder's principal).
    """

    signer: str | None = None

    @property
    def did(self) -> str:
        return self.signer or self.chain.holder


@dataclass(frozen=True)
class GatewayDecision:
    """The recorded authorization and, for a refusal, the HTTP status and error code it answers with."""

    auth: Authorization
    status: int = 200
    code: str | None = None
    """The error code of a refusal, which every refusal names (the gateway answers and counts it:
    docs/gateway.md, "Errors"); ``None`` for an allow."""

    @property
    def allowed(self) -> bool:
        return self.auth.allowed

    @property
    def message(self) -> str:
        """Why it was refused, and whether a later or re-signed try can pass, for the caller (no
        tokens, keys or argument values): ``Authorization.explain``."""
        return self.auth.explain()


class GatewayGate(Gate):
    """A ``Gate`` that also decides invocations signed by remote callers (``authorize_invocation``)."""

    # Parsed chains kept for the next call with the same token: only chains the authority has
    # verified, least recently used out first, within 1024 entries and 32 MiB of their
    # ``chain_weight`` (the memory a parsed, decided-on chain holds, as the authority's own
    # ``ChainCache`` counts it), weighed once, when a chain is kept. Until review R56 the bound
    # was 2 MiB of token text, which a parsed chain exceeds up to 20-fold: 78 chains of
    # 1,000-value ``in`` sets fit in it and held about 30 MiB. Its own cache, not a
    # ``ChainCache``: that one is keyed by trust anchors too and lets out the first kept, used
    # or not, where a chain in use here stays while others come and go.
    _parsed_limit = 1024
    _parsed_max_bytes = 32 * 1024 * 1024

    def __init__(
        self,
        policy: Policy,
        store: Store,
        *,
        trust_anchors: Iterable[PublicKey | str] | None = None,
        log_key: SigningKey | None = None,
        scheduler: SchedulerConfig | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        super().__init__(
            policy, store, trust_anchors=trust_anchors, log_key=log_key, scheduler=scheduler, tracer=tracer
        )
        self._own_key = SigningKey.generate()
        self._parsed: OrderedDict[str, tuple[Chain, int]] = OrderedDict()  # token: (chain, its weight)
        self._parsed_bytes = 0
        self._parsed_lock = threading.Lock()

    def authorize_invocation(
        self,
        chain_token: str | None,
        invocation_text: str | None,
        call: Call,
        tokens: tuple[int, int],
        approval_text: str | None = None,
        *,
        prompt_most: int | None = None,
    ) -> GatewayDecision:
        """Decide ``call`` presented with a chain token and a signed invocation; record the decision.

        Refusals: 401 for a missing, malformed, forged, expired, replayed or revoked authority;
        403 for a call that the grant or the policy does not cover; 403 ``approval_required`` for
        a call behind an approval gate without a usable approval (an approval request is opened
        and audited: ``approval_payload()`` of the answer's ``auth`` is what an approver signs);
        402 for a budget that cannot hold the reservation for ``tokens`` (prompt, max output).
        ``approval_text``: the ``X-Agentgate-Approval`` header, a signed approval as JSON (what
        ``agentgate approval sign`` writes); 400 ``malformed_approval`` when it is not one, 401
        ``ambiguous_credentials`` when it gives a key twice (as for the header sent twice). Each
        refusal is audited and reserves nothing. Raises ``AuditError``/``StoreError`` only if even
        a refusal cannot be recorded. ``prompt_most``: the most prompt tokens the call's outcome
        is charged, whatever its backend reports (``Authorization.prompt_tokens``).

        Runs holding the gate's store lock, as ``Gate.authorize`` does: decisions are recorded
        one at a time, and the outcomes a decision's transaction carries are taken under it. The
        spans it makes end after the lock is released (``ends_held``), as the Gate's do: a span
        exporter that blocks holds no other decision.
        """
        with ends_held(), self._store_lock:
            return self._authorize_invocation(
                chain_token, invocation_text, call, tokens, approval_text, prompt_most
            )

    def _authorize_invocation(
        self,
        chain_token: str | None,
        invocation_text: str | None,
        call: Call,
        tokens: tuple[int, int],
        approval_text: str | None,
        prompt_most: int | None = None,
    ) -> GatewayDecision:
        if invocation_text is not None:
            # A field value excludes the white space around it (RFC 9110, 5.5); httptools keeps
            # what ends the line (the bearer token is stripped when it is read, ``_bearer``).
            invocation_text = invocation_text.strip(" \t")
        if not chain_token or not invocation_text:
            missing = "Authorization: Bearer <chain>" if not chain_token else "X-Agentgate-Invocation"
            return self.refuse(call, 401, "missing_invocation", f"no {missing} header")
        try:
            kept = self._kept_chain(chain_token)
            chain = kept if kept is not None else parse_chain(chain_token)
            invocation = Invocation.decode(invocation_text, chain, call)
        except TokenFormatError as exc:
            return self.refuse(call, 401, "malformed_token", f"unreadable authority: {exc}")
        # A holder the policy does not name (a sub-agent's run-time key) acts for the principal
        # its chain was first issued to, as in ``Gate``: that principal's name and tenant.
        principal = self._principal_of(chain.holder, chain)
        identity = CallerIdentity(
            self.index.principal_name(principal) or "caller", self._own_key, chain, self._tenant_of(principal)
        )
        # Authentication before authorization: a caller that cannot prove its authority learns
        # nothing about what the policy would allow (401 before 403). The policy's verdict is
        # computed first (it reads nothing) but only answered after the authority's.
        verdict = self._policy_verdict(identity, call)
        if verdict.outcome is Outcome.APPROVAL_REQUIRED:
            return self._authorize_gated(
                invocation, identity, call, tokens, approval_text, verdict, prompt_most
            )
        # The common path: the authority's nonce statement and revocation read, then the refusal,
        # or the budget reservation and the allow entry, in one transaction and one commit.
        with self._decision_transaction() as tx:
            with self.grants.within(tx):
                decision = self.authority.decide(invocation)
                refusal = None if decision.allowed else self._authority_refusal(decision, call, identity)
            if kept is None and decision.allowed:
                self._keep_chain(chain)
            if refusal is not None:
                refused, status, code = refusal
                answer = GatewayDecision(self._write_refusal(refused, tx), status, code)
            elif verdict.outcome is Outcome.DENY:
                refused = Authorization(Verdict.DENY, call, identity, verdict.reasons)
                answer = GatewayDecision(self._write_refusal(refused, tx), 403, "policy_denied")
            elif (outside := self._policy_chain_refusal(decision, call, identity)) is not None:
                refused, status, code = outside
                answer = GatewayDecision(self._write_refusal(refused, tx), status, code)
            else:
                answer = self._allow(decision, verdict, identity, call, tokens, None, None, tx, prompt_most)
        if not answer.allowed:
            self._refusal_span(answer.auth)
        return answer

    def _authorize_gated(
        self,
        invocation: Invocation,
        identity: CallerIdentity,
        call: Call,
        tokens: tuple[int, int],
        approval_text: str | None,
        verdict: PolicyDecision,
        prompt_most: int | None = None,
    ) -> GatewayDecision:
        """A call behind an approval gate: decided, then recorded in a second transaction, since
        an approval vote towards a quorum above one is written in a transaction of its own."""
        decision = self.authority.decide(invocation)
        refusal = (
            self._policy_chain_refusal(decision, call, identity)
            if decision.allowed
            else self._authority_refusal(decision, call, identity)
        )
        if refusal is not None:
            refused, status, code = refusal
            return GatewayDecision(self._record_refusal(refused), status, code)
        self._keep_chain(identity.chain)
        approval = None
        if approval_text is not None:
            try:
                approval = _approval(approval_text)
            except InputError as exc:
                # Never resolved by order, as a credential header sent twice is not (``_app``).
                auth = self._record_refusal(Authorization(Verdict.DENY, call, identity, (str(exc),)))
                return GatewayDecision(auth, 401, "ambiguous_credentials")
            if approval is None:
                reason = f"the {APPROVAL_HEADER} header is not a signed approval (JSON: request, call_hash, approver, signature)"
                auth = self._record_refusal(Authorization(Verdict.DENY, call, identity, (reason,)))
                return GatewayDecision(auth, 400, "malformed_approval")
        # Bound to the grant, the model and the exact body (its digest is in the call's
        # arguments): the caller retries the same body, with a fresh invocation, and the header.
        request = self._approval_request(identity, call, verdict, None)
        assert request is not None
        rule = self._quorum_rule(verdict.approval, identity.did)
        # A vote towards a quorum above one is recorded in a transaction of its own, before the
        # allow's: revocation is read again in it (``_approval_complete``'s ``refusal``, as the
        # Gate asks its authority there), and a call revoked since the decision above records no
        # vote and is refused for that. Until review R60 a revocation committed between the two
        # (by another process) had the vote recorded on a request without grant rows.
        revoked: set[str] = set()
        approved, unused = self._approval_complete(
            approval, request, rule, refusal=functools.partial(self._revoked_in, identity, revoked)
        )
        if revoked:
            since = " before the approval was counted"
            refused = revoked_refusal(decision, call, identity, revoked, since)
            return GatewayDecision(self._record_refusal(refused), 401, "revoked")
        if approved is None:
            return self._ask_approval(
                Authorization(
                    Verdict.APPROVAL_REQUIRED, call, identity, (*verdict.reasons, *unused), decision=decision
                ),
                request,
                rule,
                uncounted=self._refused_approval(approval, request, rule),
            )
        # The decision above read revocation outside this transaction, and a person's approval
        # may have taken long: a grant revoked since (by another process) must stop the call, so
        # revocation is read again in the transaction that records the allow.
        with self._decision_transaction() as tx:
            with self.grants.within(tx):
                revoked = self.grants.revoked(identity.chain.ids)
            if revoked:
                since = " while the call waited for its approval"
                refused = revoked_refusal(decision, call, identity, revoked, since)
                answer = GatewayDecision(self._write_refusal(refused, tx), 401, "revoked")
            else:
                answer = self._allow(
                    decision, verdict, identity, call, tokens, approved, request, tx, prompt_most
                )
        if not answer.allowed:
            self._refusal_span(answer.auth)
        return answer

    def _ask_approval(
        self, asking: Authorization, request: Mapping[str, Any], rule: QuorumRule | None, *, uncounted: bool
    ) -> GatewayDecision:
        """Open the approval request ``asking`` waits for (or find the one open): 403
        ``approval_required``; or, for a chain revoked since the call was decided, 401 ``revoked``,
        nothing opened and a request the revocation made void closed (the refusal refers to it).

        Revocation is read again in the transaction that opens the request: the decision read it
        outside, and until review R61 a revocation committed between the two (by another process)
        had a request opened, and a person asked to approve, for a call that can never run.
        Raises ``StoreError`` when revocation cannot be read."""
        identity = asking.identity
        assert isinstance(identity, CallerIdentity) and asking.decision is not None
        with self._decision_transaction() as tx:
            with self.grants.within(tx):
                revoked = self.grants.revoked(identity.chain.ids)
            if not revoked:
                asked = self._record_approval_request(asking, request, rule, tx, uncounted=uncounted)
            else:
                since = " before its approval was asked"
                refused = revoked_refusal(asking.decision, asking.call, identity, revoked, since)
                asked = self._write_refusal(refused, tx, ref=self._close_asked(refused, None, tx))
        self._refusal_span(asked)  # a refused call, or one waiting for a person: in the trace too
        if revoked:
            return GatewayDecision(asked, 401, "revoked")
        return GatewayDecision(asked, 403, "approval_required")

    def _revoked_in(self, identity: CallerIdentity, revoked: set[str], tx: Transaction) -> str | None:
        """Why ``identity``'s chain is refused, revocation read in ``tx``: a link revoked, whose
        ids are added to ``revoked``; ``None`` when none is. Raises ``StoreError`` when
        revocation cannot be read."""
        with self.grants.within(tx):
            revoked.update(self.grants.revoked(identity.chain.ids))
        return "a grant of the chain was revoked" if revoked else None

    def _allow(
        self,
        decision: Decision,
        verdict: PolicyDecision,
        identity: CallerIdentity,
        call: Call,
        tokens: tuple[int, int],
        approved: Approval | None,
        request: Mapping[str, Any] | None,
        tx: Transaction | None,
        prompt_most: int | None = None,
    ) -> GatewayDecision:
        auth = Authorization(
            Verdict.ALLOW,
            call,
            identity,
            (*verdict.reasons, *decision.reasons),
            decision.findings,
            decision=decision,
        )
        recorded = self._record_allow(
            auth,
            approved,
            request,
            tokens,
            tx,
            verdict.quotas,
            rule=self._quorum_rule(verdict.approval, identity.did),
            prompt_tokens=prompt_most,
        )
        if not recorded.allowed:
            # The authority allowed the call; the chain's budget cannot meter it, the ledger could
            # not hold its reservation, a policy quota's window is full, or the approval was used
            # or expired meanwhile (until review R93 an unmetered budget was answered as that).
            if recorded.unmetered:
                return GatewayDecision(recorded, 403, "budget_not_metered")
            if recorded.budget_exhausted:
                return GatewayDecision(recorded, 402, "budget_exhausted")
            if recorded.budget_never_fits:  # not spent: the call alone is more than it holds
                return GatewayDecision(recorded, 402, "budget_too_small")
            if recorded.quota_exceeded:
                return GatewayDecision(recorded, 429, "quota_exceeded")
            return GatewayDecision(recorded, 403, "approval_not_usable")
        return GatewayDecision(recorded)

    async def gated_stream(
        self,
        auth: Authorization,
        chunks: AsyncIterator[ChatChunk],
        *,
        left: Callable[[], str | None] | None = None,
        unsent: Callable[[], bool] | None = None,
        settled: Callable[[tuple[int, int]], None] | None = None,
    ) -> AsyncGenerator[ChatChunk, None]:
        """Pass a streamed answer through for an allowed call, in its span, then settle its budget.

        The usage the backend reports is charged. A stream that ends without usage is charged its
        whole reservation (prompt, max output), and its outcome says so: the gateway cannot know
        how much was generated, and never charges less than may have been used; the span carries
        no usage then. So is one whose last usage was followed by more output (a usage counts the
        output sent with it and before it: until review R57 a backend that reported zero usage
        first, then streamed its answer, was charged nothing). One the backend fails before it delivered
        anything is released, but for ``UsageUnreadable`` (the backend ran it: charged its
        reservation, as the 502 says). One cut
        by the caller going away (or the server's shutdown) before any output is charged its
        reservation too, as a JSON call cut so is (a long prompt's prefill is work done; released,
        hanging up before the first token made it free), unless ``unsent`` says no backend was
        sent it (it waited in line): then it did not start (released, an approval it used pending
        again; until review R90 that approval was spent), as one given up in line (``NoBackend``,
        ``Shed``) that ``unsent`` says no backend was sent (until review R90b settled as started,
        its approval spent). Raises ``Denied`` for an authorization
        that is not an allow, and re-raises what ``chunks`` raises, after recording it.

        The backend stream is read by a task of its own, so that the call's span is entered and
        left in one context (a web server may resume this generator from another task). It reads
        at most ``STREAM_AHEAD`` chunks, and ``STREAM_AHEAD_BYTES`` of their events, ahead of the
        caller (``_Ahead``): a caller that reads slowly slows the backend read down instead of
        having its answer pile up in the gateway's memory (until review R94 only the chunks were
        counted: 64 events of 1 MiB, over 1 GB decoded, for a caller that stopped reading).

        ``left``, when given, is asked why the caller went away when the stream is abandoned
        (e.g. it stopped reading and its connection was cut); its answer is the outcome's reason
        in the audit log, instead of the bare cancellation.

        ``settled``, when given, is called with the usage the call was settled with (the
        backend's counts), once its outcome is settled, however the stream ended (whole, broken,
        or its caller gone): the gateway's token counter counts there what the call is charged
        (until review R71 it counted in the caller's stream, which a caller leaving after the
        usage event closes before the count). Not called for a call settled without a usage.
        """
        self._check_allowed(auth)
        queue: asyncio.Queue[ChatChunk | BaseException | None] = asyncio.Queue()  # bounded by ``ahead``
        ahead = _Ahead()
        pump = asyncio.create_task(self._pump(auth, chunks, queue, ahead, left, unsent, settled))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                ahead.taken(item.size)
                yield item
        finally:
            if not pump.done():
                pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(
        self,
        auth: Authorization,
        chunks: AsyncIterator[ChatChunk],
        queue: asyncio.Queue[ChatChunk | BaseException | None],
        ahead: _Ahead,
        left: Callable[[], str | None] | None,
        unsent: Callable[[], bool] | None,
        settled: Callable[[tuple[int, int]], None] | None = None,
    ) -> None:
        usage: tuple[int, int] | None = None
        reported = _StreamUsage()  # a usage followed by output (``stale``) is not the call's
        delivered = False
        cut = False  # by the caller going away or the server stopping, not by the backend
        unsent_cut = False  # so, or given up in line, before any backend got it (``unsent``): not started
        error: str | None = None  # the outcome's reason in the audit log
        error_type: str | None = None  # the span's: a class name (the reason may quote the backend)
        last: BaseException | None = None  # what ends the caller's stream: None, or the failure
        with self._span(auth) as span:
            try:
                async for chunk in chunks:
                    reported.see(chunk)
                    delivered = delivered or carries_output(chunk)
                    await ahead.room(chunk.size)  # waits while the caller is that far behind
                    queue.put_nowait(chunk)
            except Exception as exc:
                error, error_type = _failure_reason(exc), type(exc).__name__  # why, as ``Gate`` keeps it
                last = exc
                # Given up in line (``Shed``, ``NoBackend``) before any backend got it: as the
                # Dispatcher says (``sent`` false, over any transport), which ``Gate.arun`` honours
                # for a JSON call, or as the plain-http pool saw (until a regression review of
                # R90c only the pool was asked: a stream on a model with an https backend was
                # settled as started, its approval used up).
                unsent_cut = never_sent(auth, exc) or (
                    isinstance(exc, NoBackend) and unsent is not None and unsent()
                )
            except BaseException as exc:  # cancelled: the caller is gone, nobody reads the queue
                error = (left() if left is not None else None) or type(exc).__name__
                error_type = error.partition(":")[0]  # "caller_stalled: the caller read nothing..."
                unsent_cut = unsent is not None and unsent()
                cut = not unsent_cut
                raise
            finally:
                if isinstance(chunks, AsyncGenerator):
                    try:
                        await chunks.aclose()  # closes the backend request now, not at garbage collection
                    except Exception as exc:
                        # Its cleanup failed (met when the caller left, the stream suspended at a
                        # chunk): the call is settled all the same (until review R69 the error
                        # left before the outcome was queued, the reservation held), with this
                        # as its error when nothing else failed first.
                        _log.warning(
                            "agentgate gateway: closing the backend stream of %s failed: %s",
                            auth.call.resource,
                            exc,
                        )
                        if error is None:
                            error, error_type = _failure_reason(exc), type(exc).__name__
                            last = exc
                if (known := reported.usage) is not None:  # only what the backend reported is the call's
                    usage = (known.prompt_tokens, known.completion_tokens)
                    record_usage(span, *usage)
                elif reported.stale or (
                    # A stream whose usage is garbage before any output ran (review R69: released).
                    error is not None and (delivered or cut or isinstance(last, UsageUnreadable))
                ):  # its usage unread:
                    usage = USAGE_UNREAD  # charged as reserved
                self._settle_traced(
                    span,
                    auth,
                    "ok" if error is None else "error",
                    error,
                    usage,
                    started=not unsent_cut,
                    error_type=error_type,
                )
                if settled is not None and usage is not None and usage is not USAGE_UNREAD:
                    settled(usage)
        queue.put_nowait(last)

    def _authority_refusal(
        self, decision: Decision, call: Call, identity: CallerIdentity
    ) -> tuple[Authorization, int, str]:
        """The refusal of a call the authority engine denied, and its status: 403 when the only
        fault is that a valid grant does not cover the call, 401 when the caller's authority does
        not hold (forged, expired, not yet valid, replayed, revoked, a widened delegation...),
        whatever else is also wrong, with that fault's code.

        The engine checks coverage before it reads revocation (and stops at the first fault), so
        for a coverage refusal revocation is read here (in the transaction bound to
        ``self.grants``, if any), as ``Gate.authorize`` reads it (``Gate._revoked_instead``): a
        revoked grant is 401 ``revoked`` whatever it asks for. Raises ``StoreError`` when
        revocation cannot be read.
        """
        if decision.principal != identity.chain.holder:
            identity = self._as_signer(identity, decision.principal)
        revoked = self._revoked_instead(decision, call, identity)
        if revoked is not None:
            return revoked, 401, "revoked"
        refused = Authorization(
            Verdict.DENY, call, identity, decision.reasons, decision.findings, decision=decision
        )
        codes = [f.code for f in decision.findings]
        faults = [code for code in codes if code not in COVERAGE_CODES]
        if faults or not codes:
            return refused, 401, faults[0] if faults else "invocation_refused"
        return refused, 403, codes[0]

    def _policy_chain_refusal(
        self, decision: Decision, call: Call, identity: CallerIdentity
    ) -> tuple[Authorization, int, str] | None:
        """The refusal of a call whose chain the authority verified but the policy does not allow
        (``Gate``'s ``PolicyChains``: a root grant that lives too long, a delegation outside its
        delegator's ``delegation`` rule), as ``Gate.authorize`` refuses it: 403 with the finding's
        code, as the policy's other refusals (the caller proved its authority; the policy does not
        grant it). ``None`` when the policy allows the chain."""
        fault = self._policy_chains.fault(identity.chain)
        if fault is None:
            return None
        refused = Authorization(Verdict.DENY, call, identity, (fault.message,), (fault,), decision=decision)
        return refused, 403, fault.code

    def _as_signer(self, identity: CallerIdentity, signer: str | None) -> CallerIdentity:
        """``identity`` as the caller who signed its invocation, for a refusal whose signer is not
        the chain's holder: ``signer``, a key the signature verified under (a copied chain), by its
        own policy name and tenant (``caller`` and ``default`` where the policy names it not);
        ``None``, an invocation whose signature does not verify: nobody, never the key it claims
        nor the chain's holder (``UNVERIFIED_CALLER`` in the log, and no name, so no
        ``gen_ai.agent.name`` on the span; until review R56 the span named the holder's principal).
        """
        if signer is None:
            return replace(identity, name="", tenant="default", signer=UNVERIFIED_CALLER)
        name = self.index.principal_name(signer) or "caller"
        return replace(identity, name=name, tenant=self._tenant_of(signer), signer=signer)

    def refuse(self, call: Call, status: int, code: str, reason: str) -> GatewayDecision:
        """Audit a refusal of ``call`` by an unidentified caller (nothing reserved) and answer ``status``.

        Raises ``AuditError``/``StoreError`` if the refusal cannot be recorded.
        """
        finding = Finding(kind=FindingKind.AUTHORITY_CHAIN_OPACITY, code=code, message=reason)
        return GatewayDecision(self.record_refusal(None, call, (reason,), findings=(finding,)), status, code)

    def _kept_chain(self, token: str) -> Chain | None:
        """The parsed chain kept for ``token`` (marked as just used), or ``None``."""
        with self._parsed_lock:
            kept = self._parsed.get(token)
            if kept is None:
                return None
            self._parsed.move_to_end(token)
            return kept[0]

    def _keep_chain(self, chain: Chain) -> None:
        """Keep ``chain``, which the authority has verified, to save parsing its token again.

        Parsing checks no signature, so a chain is kept only once verified: a caller who cannot
        authenticate never displaces another's. The least recently used go first, to stay within
        ``_parsed_limit`` entries and ``_parsed_max_bytes`` of ``chain_weight``; a chain heavier
        than that alone is not kept (the authority engine still verifies a kept chain on every
        decision, from its own cache).
        """
        token = chain.token
        with self._parsed_lock:
            if token in self._parsed:
                return
            weight = chain_weight(token, chain)
            if weight > self._parsed_max_bytes:
                return
            while self._parsed and (
                len(self._parsed) >= self._parsed_limit
                or self._parsed_bytes + weight > self._parsed_max_bytes
            ):
                _, (_, gone) = self._parsed.popitem(last=False)
                self._parsed_bytes -= gone
            self._parsed[token] = (chain, weight)
            self._parsed_bytes += weight
