"""What the ``Gate`` writes for a decision (``_Recording``): the audit entry of a call (its
arguments in clear only where the policy says so), refusals with their spans, and an allow with
its budget reservations, policy quotas and consumed approval, in the decision's transaction."""

from __future__ import annotations

import copy
import functools
import threading
import time
import weakref
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from agentgate._shown import quoted
from agentgate.audit.entry import argument_digest, redact, utc_now
from agentgate.authority import Chain, Decision, GrantRepository, parse_chain, record
from agentgate.capabilities import Call
from agentgate.errors import BudgetExceeded, Denied, Expired, InputError, QuotaExceeded, Revoked
from agentgate.findings import Finding
from agentgate.gate._approval import Approval
from agentgate.gate._authorization import AgentIdentity, Authorization, Verdict, expect, listed, shown
from agentgate.gate._checks import _IDENTITY, _IDENTITY_OR_NONE, _expect_asked_in, _expect_id
from agentgate.gate._costs import _METERED, _METERED_BY_TOKENS
from agentgate.gate._lock import _serialized
from agentgate.gate._records import PARAMETERS_IN_CLEAR, recordable, redact_reasons, without_held
from agentgate.policy import Policy, QuotaRef
from agentgate.store import Transaction
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import OnceCalls
from agentgate.store.quotas import QuotaCounter

RECORDED_CHAINS_KEPT = 16384
"""How many chain tips a Gate remembers as recorded in its grant store (``_record_chain``; cleared
when full, after which each chain is recorded once more, idempotently): about 2 MB of ids."""


class _Recording:
    """The ``Gate``'s decision entries: ``_entry`` (what the audit log keeps of a call), refusals
    (``record_refusal``, ``_record_refusal``), allows (``_record_allow``: approval consumed,
    budgets reserved, quotas counted, sealed for one run) and ``explain_redacted``."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    audit: AuditLog
    ledger: BudgetLedger
    quotas: QuotaCounter
    once: OnceCalls
    approvals: ApprovalStore
    grants: GrantRepository
    _store_lock: threading.RLock
    _recorded_chains: set[str]

    if TYPE_CHECKING:  # what this part calls of the gate's other parts

        @contextmanager
        def _decision_transaction(self) -> Iterator[Transaction]: ...

        def _close_asked(
            self, refused: Authorization, call_id: str | None, tx: Transaction, call_key: str | None = None
        ) -> int | None: ...

        @classmethod
        def _call_scope(
            cls, identity: AgentIdentity | None, call_id: str | None, asked_in: tuple[str, str] | None
        ) -> str | None: ...

        def _consume_approval(
            self,
            auth: Authorization,
            approval: Approval,
            request: Mapping[str, Any],
            rule: QuorumRule | None,
            tx: Transaction,
        ) -> tuple[Authorization, int | None]: ...

        def _approval_given_span(
            self, approval: Approval, request: Mapping[str, Any], index: int
        ) -> None: ...

        def _ask_again_if_not_run(
            self,
            auth: Authorization,
            exc: Exception,
            approval: Approval | None,
            request: Mapping[str, Any] | None,
            rule: QuorumRule | None,
            once_key: str | None,
            tx: Transaction,
        ) -> Authorization | None: ...

        def _after_commit(self, span: Callable[[], None]) -> None: ...

        def _allowed(self, auth: Authorization, written: str | None = None) -> None: ...

        @staticmethod
        def _unmetered(by_unit: Mapping[str, object]) -> str: ...

        @staticmethod
        def _never_fits(identity: AgentIdentity, amounts: Mapping[str, int]) -> str | None: ...

        def _budget_reason(self, identity: AgentIdentity, exc: BudgetExceeded, tx: Transaction) -> str: ...

        @staticmethod
        def _caps(decision: Decision) -> dict[str, dict[str, int]]: ...

        def _cost(self, call: Call, tokens: tuple[int, int] | None) -> dict[str, int]: ...

        def _span(self, auth: Authorization, call_id: str | None = None) -> AbstractContextManager[Span]: ...

        def _refused_by_authority(self, identity: AgentIdentity, call: Call) -> Authorization | None: ...

    def _entry(self, auth: Authorization, kind: str) -> dict[str, Any]:
        identity = auth.identity
        loggable = self._loggable(auth.call)
        reasons = [
            *(
                redact_reasons(auth.reasons, auth.call.args, loggable, self._declared(auth.call))
                if auth.reasons
                else ()
            ),
            *(f"{f.kind}:{f.code}" for f in auth.findings),
        ]
        decided = auth.decision.args_digest if auth.decision is not None else None
        try:
            # The authority engine digested these very arguments by the audit log's encoder
            # (``args_digest``): its digest is reused, about 9 us of a decision.
            digest: str | None = f"sha256:{decided}" if decided else argument_digest(auth.call.args)
            shown = redact(auth.call.args, loggable)
        except InputError:  # arguments without a canonical form (a lone surrogate...): refused
            digest, shown = None, {}
            reasons.append("the arguments have no canonical JSON form; they are not recorded")
        return {
            "kind": kind,
            "principal": identity.did if identity else "unknown",
            "chain_hash": identity.grant_id if identity else None,
            "policy_hash": self.policy.digest or None,
            "rule": auth.rule,
            "resource": recordable(auth.call.resource),
            "args_digest": digest,
            "args": shown,
            "approver": auth.approver,
            "reasons": [recordable(reason) for reason in reasons],
        }

    def _loggable(self, call: Call) -> list[str]:
        """The arguments of ``call`` kept in clear: a tool's ``loggable`` ones, a model call's or
        GPU lease's settings (``PARAMETERS_IN_CLEAR``)."""
        kind, _, name = call.resource.partition(":")
        if kind != "tool":
            return list(PARAMETERS_IN_CLEAR.get(kind, ()))
        tool = self.policy.document.tools.get(name)
        return list(tool.loggable) if tool else []

    def _declared(self, call: Call) -> Container[str] | None:
        """The argument names a tool call's tool declares (``None`` for other calls, and for a
        tool the policy does not declare: its refusal quotes no argument name)."""
        kind, _, name = call.resource.partition(":")
        tool = self.policy.document.tools.get(name) if kind == "tool" else None
        return tool.args.keys() if tool is not None else None

    @_serialized
    def record_refusal(
        self,
        identity: AgentIdentity | None,
        call: Call,
        reasons: Sequence[str],
        *,
        findings: Sequence[Finding] = (),
        call_id: str | None = None,
        asked_in: tuple[str, str] | None = None,
    ) -> Authorization:
        """Record, as a ``deny`` entry (and an error span), a call its caller refuses before the
        Gate could decide it (an integration's own check: a tool call without an id, a tool name
        that is no resource name; the gateway's malformed requests); the refusal. ``identity`` is
        the caller's (``None``: unknown). The approval request open for the call (``call_id``) is
        closed; with ``asked_in`` (as ``authorize`` takes it) only its own run's, never another
        run's asking the same call under the same id (until review R68 a refused call of one
        thread closed another thread's request). Raises ``InputError`` when the entry cannot be
        encoded, ``reasons`` is no list of text (until review R70 a bare ``TypeError`` or
        ``AttributeError``, or one reason per character of a string), ``identity`` is no
        ``AgentIdentity`` or ``None``, ``findings`` no list of ``Finding``, ``call_id`` no text
        (until review R70 a bare ``AttributeError`` or ``TypeError``, a ``call_id`` taken as it
        came), or ``asked_in`` is no pair of valid Unicode text, ``AuditError``/``StoreError``
        when it cannot be written."""
        expect(identity, _IDENTITY_OR_NONE, "identity", _IDENTITY + " or None")
        expect(call, Call, "call", "a Call")
        said = _reasons(reasons, "reasons")
        found = tuple(listed(findings, "findings", "Finding"))
        for finding in found:
            if not isinstance(finding, Finding):
                raise InputError(f"findings must be a list of Finding, got an item {shown(finding)}")
        _expect_id(call_id, "call_id")
        _expect_asked_in(asked_in)
        refused = Authorization(Verdict.DENY, call, identity, said, found)
        call_key = None if asked_in is None else self._call_scope(identity, call_id, asked_in)
        return self._record_refusal(refused, call_id, call_key=call_key)

    @_serialized
    def record_refusals(
        self, identity: AgentIdentity | None, refusals: Sequence[tuple[Call, Sequence[str]]]
    ) -> list[Authorization]:
        """Record, as ``record_refusal`` does one (without a call id: no approval request is
        closed), each of ``refusals`` (a call and its reasons) in one decision transaction: all
        or none are written, with one commit however many they are (a model answer's invalid
        tool calls; until review R69 one transaction each). Holds the gate's store lock, as
        ``record_refusal`` does (until review R70 it wrote while another thread's decision held
        it). The refusals, in order. Raises ``InputError`` when an entry cannot be encoded, or
        an item is no (``Call``, list of text) pair, naming it, or ``identity`` is no
        ``AgentIdentity`` or ``None`` (until review R70 a bare ``ValueError``, ``TypeError`` or
        ``AttributeError``; nothing is written then), ``AuditError``/``StoreError`` when they
        cannot be written."""
        expect(identity, _IDENTITY_OR_NONE, "identity", _IDENTITY + " or None")
        refused = []
        for n, item in enumerate(listed(refusals, "refusals", "(Call, reasons) pairs")):
            where = f"refusals[{n}]"
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise InputError(f"{where} must be a (Call, reasons) pair, got {shown(item)}")
            call, reasons = item
            expect(call, Call, f"{where} call", "a Call")
            refused.append(Authorization(Verdict.DENY, call, identity, _reasons(reasons, f"{where} reasons")))
        if not refused:
            return []
        with self._decision_transaction() as tx:
            written = [self._write_refusal(auth, tx) for auth in refused]
        for auth in written:
            self._refusal_span(auth)
        return written

    def _record_refusal(
        self,
        auth: Authorization,
        call_id: str | None = None,
        *,
        close_asked: bool = True,
        call_key: str | None = None,
        authority_first: bool = False,
    ) -> Authorization:
        """Record a refusal in a decision transaction of its own; the refused authorization. With
        ``close_asked``, an approval request open for the call is closed (``_close_asked``; of the
        framework call ``call_key`` only, when given). With ``authority_first``, a call the
        authority engine refuses too is refused for the engine's reason instead
        (``_refused_by_authority``), revocation read in that transaction."""
        with self._decision_transaction() as tx:
            if authority_first and auth.identity is not None:
                with self.grants.within(tx):
                    auth = self._refused_by_authority(auth.identity, auth.call) or auth
            ref = self._close_asked(auth, call_id, tx, call_key) if close_asked else None
            refused = self._write_refusal(auth, tx, ref=ref)
        self._refusal_span(refused, call_id)
        return refused

    def _write_refusal(self, auth: Authorization, tx: Transaction, ref: int | None = None) -> Authorization:
        entry = self._entry(auth, "deny")
        if ref is not None:
            entry["ref"] = ref
        index = self.audit.append(entry, tx)
        return replace(auth, verdict=Verdict.DENY, audit_index=index)

    def _refusal_span(self, refused: Authorization, call_id: str | None = None) -> None:
        with self._span(refused, call_id):  # a refused call shows in the trace too, as an ERROR span
            pass

    def _record_allow(
        self,
        auth: Authorization,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tokens: tuple[int, int] | None,
        tx: Transaction | None = None,
        quotas: Sequence[QuotaRef] = (),
        once_key: str | None = None,
        rule: QuorumRule | None = None,
        prompt_tokens: int | None = None,
    ) -> Authorization:
        """Record an allow (approval consumed, budget reserved, policy quotas counted, audit
        entry, a call that must run once marked started) in ``tx``, or in a decision transaction
        of its own; a budget, a quota or an approval that does not hold turns it into a recorded
        refusal in the same transaction (the partial writes rolled back to a savepoint).
        ``prompt_tokens``: for a model call, the most prompt tokens its outcome is charged
        (``Authorization.prompt_tokens``; the gateway's bound of its prompt as sent)."""
        if tx is None:
            return self._record_allow_alone(
                auth, approval, request, tokens, quotas, once_key, rule, prompt_tokens
            )
        identity, decision = auth.identity, auth.decision
        assert identity is not None and decision is not None
        amounts = self._cost(auth.call, tokens)
        by_unit = self._caps(decision)
        if not by_unit.keys() <= _METERED:
            refused = replace(auth, reasons=(self._unmetered(by_unit),), unmetered=True)
            return self._write_refusal(refused, tx)
        if tokens is None and auth.call.resource.startswith("model:"):
            # Without its estimate a model call costs no tokens and no money (``_cost``): a budget
            # or a quota in those units could not charge it, nor ever refuse it. Fail closed.
            if by_unit.keys() & _METERED_BY_TOKENS:
                refused = replace(auth, reasons=(self._unmetered(by_unit),), unmetered=True)
                return self._write_refusal(refused, tx)
            unmetered = next((q for q in quotas if q.unit in _METERED_BY_TOKENS), None)
            if unmetered is not None:
                reason = (
                    f"quota {unmetered.name} counts {unmetered.unit}: a model call it counts needs "
                    "its token estimate (tokens=)"
                )
                return self._write_refusal(replace(auth, reasons=(reason,), unmetered=True), tx)
        reserve = [
            (unit, caps, amounts.get(unit, 0)) for unit, caps in by_unit.items() if amounts.get(unit, 0) > 0
        ]
        # Only what can refuse after writing needs the savepoint: an approval to consume, a quota
        # to count, a reservation against more than one budget. One budget's reservation writes
        # nothing when it refuses (``BudgetLedger.reserve``): a caller's own budget, the usual
        # case, costs no SAVEPOINT/RELEASE pair (about 6 us on SQLite, two round trips on PostgreSQL).
        guarded = (
            bool(quotas) or approval is not None or len(reserve) > 1 or any(len(c) > 1 for _, c, _ in reserve)
        )
        full: QuotaRef | None = None  # the quota whose window could not hold the call
        given: int | None = None  # the approval_given entry of an approval consumed now
        try:
            with tx.savepoint("agentgate_allow") if guarded else nullcontext():
                if approval is not None and request is not None:
                    auth, given = self._consume_approval(auth, approval, request, rule, tx)
                held = tuple(
                    (self.ledger.reserve(tx, identity.chain.ids, caps, amount, unit=unit), unit, amount)
                    for unit, caps, amount in reserve
                )
                full = self.quotas.count(tx, quotas, amounts, time.time()) if quotas else None
                if full is not None:
                    raise _quota_exceeded(full, amounts)
        except (BudgetExceeded, QuotaExceeded, Denied, Expired, Revoked, InputError) as exc:
            # An approval used by an allow of this call that did not run: asked for again.
            again = self._ask_again_if_not_run(auth, exc, approval, request, rule, once_key, tx)
            if again is not None:
                return again
            return self._refuse_unheld_allow(auth, exc, full, amounts, approval, request, tx)
        if given is not None:  # the yes holds with the allow: its span once the allow commits
            assert approval is not None and request is not None
            self._after_commit(functools.partial(self._approval_given_span, approval, request, given))
        self._record_chain(identity.chain, tx)
        entry = self._entry(auth, "allow")
        if held:
            entry["budget_delta"] = held[0][2]  # reserved, in the unit of the caller's own budget
        elif once_key is not None or auth.approver is not None:
            # Known here, it tells this allow at its index from another should its COMMIT's
            # answer be lost (``_Settlement._decision_committed``).
            entry["time"] = utc_now()
        index = self.audit.append(entry, tx)
        if once_key is not None:
            self.once.start(tx, once_key, index, [reservation for reservation, _, _ in held])
        # The output a model call's outcome is charged at most (``_cost`` has checked ``tokens``).
        model = auth.call.resource.startswith("model:")
        output = tokens[1] if tokens is not None and model else None
        allowed = Authorization(  # built directly: dataclasses.replace costs more than the rest of this step
            auth.verdict,
            auth.call,
            identity,
            auth.reasons,
            auth.findings,
            index,
            held,
            auth.request,
            auth.approver,
            decision,
            rule=auth.rule,
            once_key=once_key,
            output_tokens=output,
            prompt_tokens=prompt_tokens if model else None,
            call_id=auth.call_id,
            run_id=auth.run_id,
        )
        allowed._use.sealed = self._seal(allowed, kept=True)
        self._allowed(allowed, entry.get("time"))
        return allowed

    def _record_chain(self, chain: Chain, tx: Transaction) -> None:
        """Record the links of ``chain``, on which a call is being allowed, in the grant store in
        ``tx``, unless this Gate knows them recorded (it made the grant, or recorded it at an
        earlier allow). A chain delegated outside the Gate (the library's ``delegate``, a token
        handed on offline) is thereby named link by link by ``audit explain``, reached by
        ``revoke_holder`` and listed among the descendants a revocation by id names: until review
        R67 it was never recorded, and an allow on it showed only its tip's hash. Only an allowed
        chain is recorded (verified, its root a trust anchor): a row is the signed grant's word.
        Recorded from its token, as ``decide_held`` decided it."""
        tip = chain.id
        if tip in self._recorded_chains:
            return
        with self.grants.within(tx):
            record(self.grants, parse_chain(chain.token))
        self._after_commit(functools.partial(self._recorded_chain, tip))

    def _recorded_chain(self, tip: str) -> None:
        """Remember ``tip``'s chain as recorded (once its recording committed); at most
        ``RECORDED_CHAINS_KEPT`` are remembered."""
        if len(self._recorded_chains) >= RECORDED_CHAINS_KEPT:
            self._recorded_chains.clear()
        self._recorded_chains.add(tip)

    def _record_allow_alone(
        self,
        auth: Authorization,
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tokens: tuple[int, int] | None,
        quotas: Sequence[QuotaRef],
        once_key: str | None,
        rule: QuorumRule | None,
        prompt_tokens: int | None = None,
    ) -> Authorization:
        """``_record_allow`` in a decision transaction of its own, with the span of a refusal."""
        with self._decision_transaction() as own:
            recorded = self._record_allow(
                auth, approval, request, tokens, own, quotas, once_key, rule, prompt_tokens
            )
        if not recorded.allowed:
            self._refusal_span(recorded)
        return recorded

    def _refuse_unheld_allow(
        self,
        auth: Authorization,
        exc: Exception,
        full: QuotaRef | None,
        amounts: Mapping[str, int],
        approval: Approval | None,
        request: Mapping[str, Any] | None,
        tx: Transaction,
    ) -> Authorization:
        """Record the refusal of an allow whose budget, quota (``full``) or approval did not hold
        (``exc``), after its partial writes were rolled back."""
        identity = auth.identity
        assert identity is not None
        if isinstance(exc, QuotaExceeded) and full is not None:
            never = amounts.get(full.unit, 0) > full.limit
            refused = replace(auth, reasons=(str(exc),), quota_exceeded=full.name, quota_never_fits=never)
            return self._write_refusal(refused, tx)
        if isinstance(exc, BudgetExceeded) and (alone := self._never_fits(identity, amounts)) is not None:
            refused = replace(auth, reasons=(alone,), budget_never_fits=True)
        elif isinstance(exc, BudgetExceeded):
            refused = replace(auth, reasons=(self._budget_reason(identity, exc, tx),), budget_exhausted=True)
        else:
            # Refers to the request it ends, as a declined one does (if it was for this call).
            refused = replace(auth, reasons=(f"approval not usable: {exc}",))
            if approval is not None and request is not None:
                if isinstance(exc, Revoked):
                    # Void since the decision read the revocations (another process's, written
                    # straight into a PostgreSQL store meanwhile): closed with this refusal, as
                    # ``_close_asked`` closes one; until review R56 it stayed ``pending``.
                    self.approvals.void(approval.request, tx=tx)
                asked_at = self.approvals.asked_index(approval.request, request["call_hash"], tx=tx)
                return self._write_refusal(refused, tx, ref=asked_at)
        return self._write_refusal(refused, tx)

    def _seal(self, auth: Authorization, *, kept: bool = False) -> tuple[object, ...]:
        """What ``_check_allowed`` and ``decline`` compare: this Gate and the fields its run, its
        outcome or its refusal record (the decision too: an entry's ``args_digest`` is its). The
        Gate is held weakly (a ``weakref.ref`` equals another while its Gate lives): an allow the
        caller keeps does not keep a closed Gate alive with its chain cache, policy index,
        schedulers and the keys of its delegations. The seal ``kept`` on the authorization holds
        a copy of its approval request, not the caller's dict (until review R88b
        ``auth.request["id"] = ...`` changed the seal with it, and ``decline`` closed another
        call's request, ``run`` opened another one again); the one compared with it reads the
        request as it is now. Only a call with an approval request pays for the copy."""
        request = auth.request
        return (
            weakref.ref(self),
            auth.verdict,
            auth.call,
            auth.identity,
            auth.audit_index,
            auth.reservations,
            auth.once_key,
            auth.output_tokens,
            auth.prompt_tokens,
            auth.call_id,
            auth.run_id,
            copy.deepcopy(request) if kept and request is not None else request,
            auth.decision,
        )

    def explain_redacted(self, auth: Authorization) -> str:
        """``auth.explain()`` as the audit log would keep it: values of arguments the policy does
        not mark loggable replaced, and without the list of every capability the grant holds
        (``without_held``), as the model is told a refusal. For text that may reach logs or a
        model (a raised ``Denied``: under ``enforce=True`` the application gets it, and may hand
        it to its model); the model is told ``explain()`` itself, its own arguments included.
        Until review R60 the list stayed in this text; the audit entry, and the ``Decision`` on
        the ``Denied``, keep it."""
        redacted = redact_reasons(
            auth.reasons, auth.call.args, self._loggable(auth.call), self._declared(auth.call)
        )
        return replace(auth, reasons=tuple(without_held(reason) for reason in redacted)).explain()


def _quota_exceeded(full: QuotaRef, amounts: Mapping[str, int]) -> QuotaExceeded:
    """The error for a call that policy quota ``full`` cannot hold now, or ever. What the call
    alone counts is quoted by its size past 128 bits (``_shown.quoted``): until review R85 a token
    estimate of ``10**5000`` made this message a bare ``ValueError``."""
    quota = f"{full.limit} {full.unit} per {full.window_s} s for {full.subject}"
    alone = amounts.get(full.unit, 0)
    return QuotaExceeded(
        f"quota {full.name} allows {quota} and this call alone counts {quoted(alone)}: it can never fit"
        if alone > full.limit
        else f"quota {full.name} reached: {quota}"
    )


def _reasons(reasons: object, name: str) -> tuple[str, ...]:
    """``reasons`` (a refusal's, given to ``record_refusal``/``record_refusals``) as a tuple of
    text; ``InputError`` naming ``name`` for anything else, before anything is written."""
    said = tuple(listed(reasons, name, "text"))
    for reason in said:
        if not isinstance(reason, str):
            raise InputError(f"{name} must be a list of text, got an item {shown(reason)}")
    return said
