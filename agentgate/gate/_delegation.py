"""How the ``Gate`` hands authority on (``_Delegation``): root grants issued to agents, grants
delegated to sub-agents under the policy's delegation rules, and revocation, each recorded with
its audit entry."""

from __future__ import annotations

import functools
import logging
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING

from opentelemetry.trace import INVALID_SPAN, Span, Tracer

from agentgate import _confusables
from agentgate._names import MAX_NAME_CHARS, check_agent_name, check_canonical_name
from agentgate._names import check_name as _check_name
from agentgate._shown import quoted
from agentgate.audit.spans import (
    ends_held,
    grant_span,
    record_decision,
    record_revocation,
    revoke_span,
)
from agentgate.authority import (
    Authority,
    Budget,
    Chain,
    GrantRepository,
    HolderRevocation,
    Revocation,
    delegate,
    findings_of,
    issue,
    parse_chain,
    record,
    revoke,
    revoke_holder,
    scan_holder,
)
from agentgate.authority._chain_findings import chain_finding, revoked_finding
from agentgate.authority._revocation import revoked_id, storable_reason
from agentgate.capabilities import Capability
from agentgate.errors import (
    AuthorityError,
    CapabilityError,
    Denied,
    InputError,
    Revoked,
    ScopeCreep,
    StoreError,
    TokenFormatError,
)
from agentgate.findings import Finding, FindingKind
from agentgate.gate._authorization import AgentIdentity, expect, listed, shown
from agentgate.gate._checks import (
    _IDENTITY,
    _IDENTITY_OR_NONE,
    _NO_CHAIN,
    _TEXT_OR_NONE,
    _finding,
    call_tag_ending,
    delegated_purpose,
    issued_purpose,
    principal_named,
    principals_named,
    several_principals,
)
from agentgate.gate._lock import _serialized
from agentgate.gate._policy_chain import PolicyChains
from agentgate.gate._records import recordable, revocation_entry, without_held
from agentgate.keys import PublicKey, SigningKey
from agentgate.policy import Policy, PolicyIndex, role_grant_template
from agentgate.store import Store, Transaction
from agentgate.store.agent_names import AgentNames
from agentgate.store.audit import AuditLog

_log = logging.getLogger("agentgate.gate")

DELEGATIONS_PURGE_S = 1.0
"""How often, at most, ``Gate.delegations`` is cleared of expired delegations (and the approval
requests asked in this process of expired ones)."""


DELEGATIONS_KEPT = 4096
"""The most delegations ``Gate.delegations`` keeps (the oldest go first): each holds its
sub-agent's identity, its signing key included (about 16 KiB), and nothing decides from the list
(a delegation for the same call is answered from the store, ``_delegated_before``)."""

AGENT_NAMES_KEPT = 10_000
"""The most agent names a Gate keeps how they read (``_read_alike``): the latest granted (a name
granted again is the latest). At most two keys each; a name forgotten past it is no longer
compared with."""


REVOKED_READ_AT_ONCE = 8192
"""How many grant ids ``Gate.delegations`` asks the store about in one statement: every grant of
the list at once (``DELEGATIONS_KEPT`` delegations and the few grants above them), below the bound
parameters SQLite (32766) and PostgreSQL (65535) take in one statement."""


_ANCHORS_FIX = "issue with one of the policy's trust anchors, or add this key to its trust_anchors"
"""What a refusal ``untrusted_root`` of ``Gate.issue`` and ``Gate.delegate`` tells the person to do
(until review R64 it named no fix)."""


DELEGATED_PARSED_MAX = 1024
"""How many parsed delegated chains a Gate keeps for ``delegate(call=...)`` (cleared when full)."""


MAX_AGENT_NAME_CHARS = MAX_NAME_CHARS
"""The most characters an agent's name may hold (``Gate.issue``, ``Gate.delegate``,
``delegation_tool``): the spans of its grant and of all its calls carry it whole (they cut every
name at ``MAX_CALL_ID_CHARS``), and a name longer than any reader can take in is no name. The
check is ``_names.check_name``, which ``check_tenant`` and the dispatcher share."""


def _delegation_terms(
    name: object, key: object, capabilities: object, ttl: object, budget: object
) -> list[Capability]:
    """The capabilities of a delegation to ``key`` under ``name``, once its terms are checked
    (``Gate.delegate``, and ``delegation_tool`` when it is made): ``InputError`` naming the
    parameter for a name that is not non-empty, valid Unicode text (a lone surrogate) of at most
    ``MAX_AGENT_NAME_CHARS`` visible characters on one line (``_check_name``), a key
    that is not a ``SigningKey``, a ``ttl`` that is not a positive ``timedelta``, a budget that
    is not a non-negative whole number or ``None``; ``CapabilityError`` (an ``InputError``) for
    a capability that does not parse, and naming ``capabilities`` for one string (refused, not
    read character by character) or anything else that is not a list."""
    if not isinstance(name, str) or not name:
        raise InputError(
            f"a sub-agent's name must be non-empty text, got {shown(name) if name != '' else 'empty text'}"
        )
    check_agent_name(name, "a sub-agent's")
    expect(key, SigningKey, "key", "the sub-agent's own SigningKey")
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise InputError(f"a delegation's ttl is a positive timedelta, got {shown(ttl)}")
    if budget is not None and (type(budget) is not int or budget < 0):
        raise InputError(f"a delegation's budget is a non-negative whole number or None, got {shown(budget)}")
    return [
        c if isinstance(c, Capability) else Capability.parse(c)
        for c in listed(
            capabilities,
            "capabilities",
            "capabilities (Capability or text such as 'tool:x')",
            CapabilityError,
        )
    ]


def _first_difference(name: str, other: str) -> str:
    """Where ``name`` first differs from ``other``, in words (``: character 3 is U+0049 LATIN
    CAPITAL LETTER I, where the other has U+006C LATIN SMALL LETTER L``); empty when one is the
    start of the other."""
    at = next((i for i, (a, b) in enumerate(zip(name, other, strict=False)) if a != b), None)
    if at is None:
        return ""
    said = [f"U+{ord(c):04X} {unicodedata.name(c, 'an unnamed character')}" for c in (name[at], other[at])]
    return f": character {at + 1} is {said[0]}, where the other has {said[1]}"


class _Delegation:
    """The ``Gate``'s grants: ``issue`` (a root grant for a role), ``delegate`` (an attenuated
    grant to a sub-agent, handed on again for the same call), ``revoke`` and ``revoke_holder``.
    Each grant, and each refusal to make one, is audited; ``delegations`` lists the live
    delegations this gate made (neither expired nor revoked, revocation read from the store; at
    most ``DELEGATIONS_KEPT``)."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    index: PolicyIndex
    audit: AuditLog
    grants: GrantRepository
    authority: Authority
    store: Store
    _names_on_store: AgentNames | None
    _store_lock: threading.RLock
    _lock: threading.Lock
    _delegations: list[tuple[str, AgentIdentity]]
    _agent_names: dict[str, frozenset[str]]
    _name_readings: dict[str, tuple[int, str]]
    _purge_at: float
    _parsed_delegated: dict[str, Chain]
    _policy_chains: PolicyChains
    tracer: Tracer

    if TYPE_CHECKING:  # what this part calls of the gate's other parts

        def _tenant_of(self, did: str) -> str: ...

        def _untraced(self) -> bool: ...

        @contextmanager
        def _decision_transaction(self) -> Iterator[Transaction]: ...

        def _void_revoked(self, grant_ids: Collection[str], tx: Transaction) -> None: ...

        def _borrowed_identity(self, identity: AgentIdentity) -> Finding | None: ...

        def _after_commit(self, span: Callable[[], None]) -> None: ...

        def _recorded_chain(self, tip: str) -> None: ...

    @property
    @_serialized
    def delegations(self) -> list[tuple[str, AgentIdentity]]:
        """(parent agent name, sub-agent identity) for the live delegations this gate made, in
        order (at most ``DELEGATIONS_KEPT``, the latest): a new list at each read, without the
        ones whose grant has expired or is revoked, its own or an ancestor's, by whoever revoked
        it (this gate, another on the same store, ``agentgate grant revoke``).

        Revocation is read from the store at each read, in one statement for the whole list
        (``REVOKED_READ_AT_ONCE`` grant ids per statement); the revoked ones leave the list, with
        their sub-agents' keys. Until review R62 only a revocation through this gate took one
        off, and an expired one stayed until the next delegation. Informative: nothing decides
        from it, and no decision reads it. Raises ``StoreError`` when the store cannot answer
        (a closed gate's, with delegations listed): a revocation that cannot be read is never
        shown as a grant still live."""
        with self._lock:
            held = self._delegations.copy()  # copied: the store is read without holding ``_lock``
        ids = sorted({grant_id for _, child in held for grant_id in child.chain.ids})
        revoked: set[str] = set()
        for start in range(0, len(ids), REVOKED_READ_AT_ONCE):
            revoked |= self.grants.revoked(ids[start : start + REVOKED_READ_AT_ONCE])
        if revoked:
            self._forget_revoked(revoked)
        now = time.time()
        return [d for d in held if d[1].chain.tip.expires > now and revoked.isdisjoint(d[1].chain.ids)]

    @delegations.setter
    def delegations(self, kept: list[tuple[str, AgentIdentity]]) -> None:
        """Replace the list the delegations are kept in (a list this gate then appends to)."""
        with self._lock:
            self._delegations = kept

    @_serialized
    def issue(
        self, anchor: SigningKey, *, name: str, key: SigningKey, role: str, tenant: str | None = None
    ) -> AgentIdentity:
        """A root grant from ``anchor`` (a trust anchor) to ``key`` holding exactly what ``role`` allows.

        The grant's signed purpose names the role and a digest of ``name`` (``issued_purpose``):
        ``Gate.authorize`` refuses an identity that presents the grant under another name
        (``inherited_identity``; until review R66 the name was a label its holder chose).

        The grant is recorded with its audit entry (an ``allow`` on ``agent:NAME`` by the anchor)
        in one transaction. Raises ``InputError`` for a ``name`` that is not non-empty, valid
        Unicode text of at most ``MAX_AGENT_NAME_CHARS`` visible characters on one line (no
        control, bidi or invisible format character: ``_check_name``), a ``tenant`` that is not
        ``None`` or such text (until review R56 any text, carried on the identity and handed on to
        its sub-agents), an ``anchor`` or ``key`` that is not a ``SigningKey``, a ``role`` that is
        not text; ``PolicyError`` for an unknown role (its hint "did you mean" a close one),
        ``Denied`` (audited, as a refused delegation) for an ``anchor`` that is not one of this
        Gate's trust anchors (a key rotated out of the policy): every call on such a grant would
        be refused ``untrusted_root``; ``ScopeCreep`` (audited, with its finding) for a ``role``
        the policy does not let ``key``'s principal hold, itself or through a role it inherits
        (``role_not_held``, naming the principal and the role; a key the policy does not name
        holds none), and for a grant the policy's decisions would refuse (a role held through
        another whose ``ttl_s`` or ``budget`` is smaller: ``root_ttl_above_policy``,
        ``root_budget_above_policy``): until review R58 such a grant was issued, and every call
        on it refused; ``Denied`` (audited, ``inherited_identity``) for a ``name`` the policy
        gives a principal of another key (``_borrowed_name``: until review R65 issued, and every
        call on it refused); ``Denied`` (audited, ``authority_chain_opacity``/``name_reads_alike``)
        for a free ``name`` that reads as, and is not, one granted before on the store, by this Gate
        or another process (``_read_alike``, ``_claim_name``: ``heIper`` after ``helper``; until
        review R69 issued); ``StoreError`` (nothing written) where the store's record of the names
        (``agentgate_agent_names``) is missing and this role may not create it. A closed Gate raises ``StoreError``
        (the store is closed), as ``authorize`` does, for a refusal too (``_audited_refusal``).
        """
        if not isinstance(name, str) or not name:
            raise InputError(
                f"an agent's name must be non-empty text, got {shown(name) if name != '' else 'empty text'}"
            )
        check_agent_name(name, "an agent's")
        self._check_free_name_form(name, "an agent's")
        if not isinstance(tenant, str | None):
            raise InputError(f"an agent's tenant must be text or None, got {shown(tenant)}")
        if tenant:  # empty text, as None: the tenant the policy gives the agent
            _check_name(tenant, "an agent's tenant")
        expect(anchor, SigningKey, "anchor", "the trust anchor's SigningKey")
        expect(key, SigningKey, "key", "the agent's own SigningKey")
        expect(role, str, "role", "a role name of the policy")
        if anchor.did not in self.authority.anchors:
            with self._grant_span("issue", name, anchor.did, key) as span:
                message = (
                    f"{anchor.did} is not a trust anchor of this policy: it issues nothing; {_ANCHORS_FIX}"
                )
                refused = Denied(message)
                refused.finding = _finding(FindingKind.AUTHORITY_CHAIN_OPACITY, "untrusted_root", message)
                raise self._refused_on(span, self._audited_refusal(refused, anchor.did, f"agent:{name}"))
        template = role_grant_template(self.policy, role)
        # A key that holds no such role (one the policy does not name: a principal's rotated key)
        # is refused for that first; a borrowed name is then a principal's key under another's.
        if not self.index.holds_role(key.did, role):
            with self._grant_span("issue", name, anchor.did, key, template.capabilities) as span:
                raise self._refused_on(
                    span, self._audited_refusal(self._role_not_held(key, role), anchor.did, f"agent:{name}")
                )
        borrowed = self._borrowed_name(name, key, issuing=True) or self._read_alike(name, issuing=True)
        if borrowed is not None:
            with self._grant_span("issue", name, anchor.did, key, template.capabilities) as span:
                raise self._refused_on(span, self._audited_refusal(borrowed, anchor.did, f"agent:{name}"))
        budget = Budget(template.budget.limit, template.budget.unit) if template.budget else None
        with self._grant_span("issue", name, anchor.did, key, template.capabilities) as span:
            try:
                chain = issue(
                    anchor,
                    key.public,
                    template.capabilities,
                    ttl=template.ttl_s,
                    budget=budget,
                    max_depth=template.max_depth,
                    purpose=issued_purpose(role, name),
                )
            except CapabilityError as exc:
                # A rule holding a number no token carries (``le: 500.5``): said with the role,
                # which the error of ``issue`` cannot name (until review R83 it named neither it
                # nor where to look); ``policy lint`` reports the rule at its line.
                raise CapabilityError(
                    f"no grant for role {role} can be issued to {name}: {exc}; `agentgate policy lint` "
                    "reports the rule (role_grant_not_issuable)"
                ) from None
            # The role's template is within the policy's bounds for the role; a role held only
            # through another that lives shorter or spends less is not: refused here, as the
            # decisions on the grant would refuse every call.
            fault = self._policy_chains.fault(chain)
            if fault is not None:
                outside = ScopeCreep(
                    f"a grant for role {role} to {name} is outside the policy: {fault.message}"
                )
                outside.finding = fault
                raise self._refused_on(span, self._audited_refusal(outside, anchor.did, f"agent:{name}"))
            # A root grant is an act of authority like a delegation: the log shows who issued what to whom.
            try:
                index, first_at = self._record_grant(
                    chain,
                    anchor.did,
                    chain.id,
                    f"agent:{name}",
                    f"issued grant {chain.id} to {name} ({key.did}) as role {role}: "
                    + ", ".join(str(c) for c in template.capabilities)
                    + f"; {template.ttl_s}s"
                    + (f"; budget {budget.amount} {budget.unit}" if budget is not None else ""),
                    name=name,
                )
            except Denied as taken:  # the name reads as one another process granted (``_claim_name``)
                raise self._refused_on(
                    span, self._audited_refusal(taken, anchor.did, f"agent:{name}")
                ) from None
            self._remember_name(name, first_at)
            return self._granted_on(
                span, AgentIdentity(name, key, chain, tenant or self._tenant_of(key.did), index)
            )

    @_serialized
    def delegate(
        self,
        parent: AgentIdentity | None,
        *,
        name: str,
        key: SigningKey,
        capabilities: Iterable[Capability | str],
        ttl: timedelta,
        budget: int | None = None,
        call: str | None = None,
    ) -> AgentIdentity:
        """A sub-agent identity: a fresh grant from ``parent`` to ``key``, attenuated to
        ``capabilities`` and ``budget``, living ``ttl`` and never past the parent. Audited either way.

        ``budget`` is in the unit of the parent's budget, or, where the parent's grant carries
        none, in the unit of the policy's delegation rule for it (``usd_micros`` where no rule has
        a budget): until review R85 it was ``usd_micros`` then, whatever the rule's unit. Where
        the parent's roles have several rules for it, in different units, the unit is that of
        the first, in the order the policy declares its roles, that admits ``budget`` (and
        ``ttl``) in it, as a decision on the chain reads it (until review R85b the first rule's,
        admitting or not).

        ``call`` names the call that delegates (``delegation_tool``: the tool call's thread, step
        and id), signed into the grant's purpose as a digest. A live grant recorded in the store
        for the same ``call``, parent, key and terms (expiring no later than a fresh one of
        ``ttl`` would), by this process or another, is handed on
        again instead of a fresh one, once the checks below pass as for a fresh one: a sub-agent
        resumed by another process (a restart, another worker) keeps the grant its pending
        approval is bound to. Handing it on again is not audited again; the grant's ``allow``
        entry is the one recorded when it was made. A recorded grant is handed on again only once
        it verifies (``_delegated_before``): a row that does not (planted, edited, revoked) is
        ignored, and the fresh grant's ``allow`` entry names it.

        The policy's ``delegation`` rule of the parent's roles bounds what may be handed on
        (capabilities, TTL, budget); the authority engine checks attenuation against the
        parent's grant and its delegation depth. Raises ``ScopeCreep`` (with the finding) when
        either refuses, and when the parent's chain is one the policy refuses at every call
        (``PolicyChains``: made outside the Gate beyond a root grant's ``ttl_s`` or ``budget``,
        or a delegation rule; until review R58 it handed on, and the sub-agent's every call was
        refused), ``Expired``/``Denied`` from the authority engine, ``Denied`` when there
        is no parent identity at all or ``name`` is one the policy gives a principal of another
        key (``_borrowed_name``, ``inherited_identity``; until review R65 delegated to), or
        ``parent`` carries such a name (``_refuse_borrowed_parent``, as ``authorize`` refuses a
        call on it; until review R66 it delegated), or a free ``name`` reads as, and is not, one
        granted before on the store, by this Gate or another process (``_read_alike``,
        ``_claim_name``, ``name_reads_alike``; until review R69 delegated to), ``StoreError``
        (nothing written) where the store's record of the names cannot be made (as for
        ``issue``), and ``InputError`` (nothing written) for arguments of the wrong type: a
        ``parent`` that is not an ``AgentIdentity``, a ``ttl`` that is not a positive
        ``timedelta``, a ``name`` that ends as a delegating call's tag (``call_tag_ending``:
        ``helper; call`` and 32 hex digits) with no ``call`` (its grant would read as one to
        ``helper`` for a call; until review R87 delegated to: with a ``call``, whose tag follows,
        it reads as it is, and is delegated, as before R87), and the others
        ``_delegation_terms`` checks. A closed Gate raises
        ``StoreError``, as ``authorize`` does, for a refusal too. A refusal's text leaves out what
        the parent holds (``without_held``); its finding and its audit entry keep it.
        """
        caps = _delegation_terms(name, key, capabilities, ttl, budget)
        self._check_free_name_form(name, "a sub-agent's")
        expect(parent, _IDENTITY_OR_NONE, "parent", _IDENTITY)
        expect(call, _TEXT_OR_NONE, "call", "text or None")
        if call is None and (shorter := call_tag_ending(name)) is not None:
            raise InputError(
                f"a sub-agent's name {quoted(name)} ends as a delegating call's tag ('; call' and "
                "32 hex digits), which the Gate signs after the name into the grant's purpose: "
                f"delegated without a call, the grant would read as one to {quoted(shorter)} for a "
                "call; write the name without that ending"
            )
        resource = f"agent:{name}"
        purpose = delegated_purpose(name, call)
        if parent is None:
            with self._grant_span("delegate", name, "unknown", key, caps) as span:
                refused = Denied(
                    "no identity in the run context: there is no grant to delegate from; run the "
                    "delegating agent with context=AgentIdentity(...), made by Gate.issue or Gate.delegate"
                )
                refused.finding = _NO_CHAIN
                raise self._refused_on(span, self._audited_refusal(refused, "unknown", resource))
        with self._grant_span("delegate", name, parent.did, key, caps, parent.grant_id) as span:
            tip = parent.chain.tip
            asked = int(ttl.total_seconds())
            seconds = max(1, min(asked, tip.expires - int(time.time())))
            try:
                # A revoked grant (or ancestor) hands nothing on, whatever its signature still says;
                # nor does a chain whose root this policy no longer trusts (its anchor rotated out):
                # every call on it would be refused ``untrusted_root``, as Gate.issue refuses.
                self._refuse_borrowed_parent(parent)
                borrowed = self._borrowed_name(name, key) or self._read_alike(name)
                if borrowed is not None:
                    raise borrowed
                self._refuse_revoked(parent)
                self._refuse_untrusted(parent)
                self._refuse_outside_policy(parent)
                unit = self._check_delegation_rule(parent, caps, seconds, budget, asked)
                again, ignored = (
                    (None, [])
                    if call is None
                    else self._delegated_before(parent, key, caps, budget, unit, purpose, seconds)
                )
                if again is not None:
                    # granted by a version before the store kept names
                    self._remember_name(name, self._claim_unknown_name(name))
                    child = AgentIdentity(name, key, again, parent.tenant)
                    return self._granted_on(span, self._handed_on(parent, child, again=True))
                chain = delegate(
                    parent.chain,
                    parent.key,
                    key.public,
                    caps,
                    ttl=seconds,
                    budget=Budget(budget, unit) if budget is not None else None,
                    purpose=purpose,
                )
                index, first_at = self._record_grant(
                    chain,
                    parent.did,
                    parent.grant_id,
                    resource,
                    f"delegated grant {chain.id} to {name} ({key.did}): "
                    + ", ".join(str(c) for c in caps)
                    + f"; {seconds}s"
                    # The budget the child carries: the one given, else its parent's, whole.
                    + (
                        f"; budget {held.amount} {held.unit}"
                        if (held := chain.tip.budget) is not None
                        else ""
                    ),
                    parent=parent,
                    ignored=ignored,
                    name=name,
                )
            except AuthorityError as exc:
                self._refused_on(span, self._audited_refusal(exc, parent.did, resource, parent.grant_id))
                # Raised, the refusal leaves out what the parent holds (``without_held``), as a
                # refused call's ``Denied`` does: a supervisor's model is told this text, and the
                # list pins what an argument the framework injects may be filled with (an API key).
                # The audit entry (above) and the finding keep it. Until review R61 it was raised,
                # and told, whole.
                exc.args = (without_held(str(exc)),)
                raise
            self._remember_name(name, first_at)
            child = AgentIdentity(name, key, chain, parent.tenant, index)
            return self._granted_on(span, self._handed_on(parent, child))

    def _grant_span(
        self,
        action: str,
        name: str,
        issuer: str,
        key: SigningKey,
        caps: Iterable[Capability] = (),
        parent: str | None = None,
    ) -> AbstractContextManager[Span]:
        """The span of one grant decision (``grant_span``); none while nothing could record it,
        as for calls (``_untraced``)."""
        if self._untraced():
            return nullcontext(INVALID_SPAN)
        return grant_span(
            action,
            recordable(name),
            issuer=issuer,
            audience=key.did,
            parent=parent,
            resources=(c.resource for c in caps),
            tracer=self.tracer,
        )

    def _granted_on(self, span: Span, granted: AgentIdentity) -> AgentIdentity:
        """``granted``, its grant recorded on ``span`` as an ``allow`` with its audit entry's index
        (none for a grant handed on again: its entry is the one recorded when it was made)."""
        if span.is_recording():
            record_decision(
                span,
                "allow",
                policy_id=self.policy.digest or None,
                capability_id=granted.grant_id,
                chain_depth=len(granted.chain.links),
                audit_index=granted.audit_index,
            )
        return granted

    def _refused_on(self, span: Span, refused: AuthorityError) -> AuthorityError:
        """``refused`` (audited), recorded on ``span`` as a ``deny`` with its entry's index and its
        message (200 characters at most) as the span's description."""
        if span.is_recording():
            record_decision(
                span,
                "deny",
                policy_id=self.policy.digest or None,
                audit_index=refused.audit_index,
                reason=recordable(str(refused))[:200],
                findings=findings_of(refused),
            )
        return refused

    def _delegated_before(
        self,
        parent: AgentIdentity,
        key: SigningKey,
        caps: list[Capability],
        budget: int | None,
        unit: str,
        purpose: str,
        seconds: int,
    ) -> tuple[Chain | None, list[str]]:
        """The live chain recorded as delegated from ``parent`` to ``key`` with ``purpose`` and
        these terms (``delegate``'s ``call``; ``budget`` in ``unit``), if any, that expires no
        later than a fresh one living ``seconds`` would (until review R60 a grant made for a
        longer ``ttl`` was handed on for a shorter one, ten minutes for one asked); with the rows
        read and ignored, each named with why (``_ignored_row``).

        A row is the store's word, written by whoever may insert into the grants table: the
        chain is handed on only once it verifies as a grant of ``parent``'s to ``key``
        (``_untrusted_row``) and is not revoked. Until review R68 a row was handed on as read, a
        planted one too (every call on it then refused ``bad_signature``), a revoked one (refused
        ``revoked``), and a token that did not parse made every such delegation raise
        ``TokenFormatError``."""
        parsed = self._parsed_delegated
        now = int(time.time())
        ignored: list[str] = []
        for row_id, token in self.grants.delegated(parent.grant_id, key.did, now=now):
            chain = parsed.get(token)
            if chain is None:
                try:
                    chain = parse_chain(token)
                except TokenFormatError as exc:  # never cached: read, and named, each time
                    ignored.append(self._ignored_row(row_id, f"its token does not parse ({exc})"))
                    continue
                if len(parsed) >= DELEGATED_PARSED_MAX:
                    parsed.clear()
                parsed[token] = chain
            tip = chain.tip
            if not (
                tip.purpose == purpose
                and tip.expires <= now + seconds
                and list(tip.capabilities) == caps
                and (
                    budget is None
                    or (tip.budget is not None and (tip.budget.amount, tip.budget.unit) == (budget, unit))
                )
            ):
                continue  # another call's grant, or other terms
            why = self._untrusted_row(row_id, chain, parent, key, now)
            if why is None and self.grants.revoked([tip.id]):
                why = "it is revoked"
            if why is not None:
                ignored.append(self._ignored_row(row_id, why))
                continue
            return chain, ignored
        return None, ignored

    def _untrusted_row(
        self, row_id: str, chain: Chain, parent: AgentIdentity, key: SigningKey, now: int
    ) -> str | None:
        """Why the recorded ``chain`` (row ``row_id``) is no grant of ``parent``'s to ``key`` that
        a call could use: its tip is not the row's grant, its links above the tip are not
        ``parent``'s chain, its tip is to another key or expired, or a signature or link does not
        verify from this Gate's trust anchors (``chain_finding``, which a decision asks); else
        ``None``."""
        tip = chain.tip
        if tip.id != row_id:
            return f"its token's grant is {tip.id}, not the row's"
        if chain.links[:-1] != parent.chain.links:
            return f"its chain does not extend {parent.name}'s grant {parent.grant_id}"
        if tip.audience != key.did:
            return f"its grant is to {tip.audience}, not {key.did}"
        if tip.expires <= now:
            return "its grant has expired"
        found = chain_finding(chain, self.authority.anchors)
        return None if found is None else f"{found.kind}:{found.code}: {found.message}"

    @staticmethod
    def _ignored_row(row_id: str, why: str) -> str:
        """The note (a reason of the fresh grant's ``allow`` entry, and a warning logged by
        ``agentgate.gate``) on the grants row ``row_id``, read for a delegation and not handed on."""
        note = f"ignored recorded grant {recordable(row_id)[:80]}: {why}"
        _log.warning("agentgate: delegation: %s", note)
        return note

    def _handed_on(
        self, parent: AgentIdentity, child: AgentIdentity, *, again: bool = False
    ) -> AgentIdentity:
        """``child``, kept in ``delegations`` (the live ones) under ``parent``'s name; one handed
        on ``again`` is kept once. At most ``DELEGATIONS_KEPT`` are kept: the oldest go."""
        chain = child.chain
        with self._lock:  # the live delegations only: a long-running service delegates per request
            now = time.time()
            if now >= self._purge_at:
                # One pass over the list when its soonest grant has expired, at most once every
                # DELEGATIONS_PURGE_S: a service with thousands of live delegations does not scan
                # them all at every delegation.
                self._delegations[:] = [d for d in self._delegations if d[1].chain.tip.expires > now]
                soonest = min((d[1].chain.tip.expires for d in self._delegations), default=float("inf"))
                self._purge_at = max(soonest, now + DELEGATIONS_PURGE_S)
            if not again or all(d[1].chain.id != chain.id for d in self._delegations):
                self._delegations.append((parent.name, child))
                del self._delegations[: max(0, len(self._delegations) - DELEGATIONS_KEPT)]
            self._purge_at = min(self._purge_at, max(chain.tip.expires, now + DELEGATIONS_PURGE_S))
        return child

    def _audited_refusal(
        self, refused: AuthorityError, principal: str, resource: str, chain_hash: str | None = None
    ) -> AuthorityError:
        """``refused`` (a grant not issued or delegated), once its ``deny`` entry is appended: its
        message and its finding as ``kind:code``, which ``audit_index`` then names.

        Appended in a decision transaction, as a refused call's entry is: a closed Gate (or store)
        raises ``StoreError`` (the store is closed), as ``authorize`` and a grant it would make
        do (until review R59 ``AuditError``, as if the log had refused the entry); a log that
        cannot be written raises ``AuditError``."""
        reasons = [str(refused), *(f"{f.kind}:{f.code}" for f in findings_of(refused))]
        entry = {
            "kind": "deny",
            "principal": principal,
            "resource": resource,
            "policy_hash": self.policy.digest or None,  # which version refused, mid-rollout too
            "reasons": reasons,
        }
        with self._decision_transaction() as tx:
            refused.audit_index = self.audit.append(
                entry if chain_hash is None else {**entry, "chain_hash": chain_hash}, tx
            )
        return refused

    def _role_not_held(self, key: SigningKey, role: str) -> ScopeCreep:
        """The refusal (``scope_creep`` ``role_not_held``) of a root grant for ``role`` to ``key``,
        which the policy does not let hold it: every call on such a grant would be refused."""
        message = self.index.role_refusal(key.did, role) or f"{key.did} may not hold role {role}"
        refused = ScopeCreep(message)
        refused.finding = _finding(FindingKind.SCOPE_CREEP, "role_not_held", message)
        return refused

    def _refuse_borrowed_parent(self, parent: AgentIdentity) -> None:
        """Raise ``Denied`` (``inherited_identity``, the finding ``Gate.authorize`` refuses a call
        on ``parent`` with) when ``parent`` carries a principal's name on a key the policy does not
        give that principal (``_borrowed_identity``): it would delegate, and ``delegations`` list
        the grant, as that principal. Until review R66 such an identity (built by hand, restored
        from a checkpoint) delegated."""
        finding = self._borrowed_identity(parent)
        if finding is not None:
            refused = Denied(finding.message)
            refused.finding = finding
            raise refused

    def _refuse_untrusted(self, parent: AgentIdentity) -> None:
        """Raise ``Denied`` (``untrusted_root``) when ``parent``'s chain was issued by a key that is
        not one of this Gate's trust anchors."""
        issuer = parent.chain.root.issuer
        if issuer not in self.authority.anchors:
            message = (
                f"{parent.name}'s chain was issued by {issuer}, which is not a trust anchor of this "
                f"policy; {_ANCHORS_FIX}"
            )
            refused = Denied(message)
            refused.finding = _finding(FindingKind.AUTHORITY_CHAIN_OPACITY, "untrusted_root", message)
            raise refused

    def _refuse_outside_policy(self, parent: AgentIdentity) -> None:
        """Raise ``ScopeCreep`` with the finding every call on ``parent``'s chain is refused with
        (``PolicyChains``: a root grant beyond its holder's roles, a delegation beyond its
        delegator's rule), for a chain made outside the Gate: it hands nothing on, since every
        call on a grant below it would be refused with the same finding."""
        fault = self._policy_chains.fault(parent.chain)
        if fault is not None:
            refused = ScopeCreep(
                f"{parent.name}'s chain is outside the policy, so it hands nothing on: {fault.message}"
            )
            refused.finding = fault
            raise refused

    def _borrowed_name(self, name: str, key: SigningKey, *, issuing: bool = False) -> Denied | None:
        """The refusal (``Denied``, ``implicit_trust_inheritance``/``inherited_identity``, as
        ``Gate.authorize`` refuses a principal's name on another principal's key) of a grant to
        ``key`` under ``name`` when the policy gives ``name`` to a principal of another DID: the
        agent would act, and the audit log would record its grant (``agent:NAME``), as that
        principal; else ``None``. ``issuing``: for ``issue`` (an agent), else ``delegate`` (a
        sub-agent). Until review R65 such a grant was made (by ``issue``, one on which every call
        was then refused). ``name`` is compared as its NFKC, case-folded form (``_checks.principal_named``:
        until review R66 exactly, and ``Researcher`` was granted). A name that reads as several
        principals (``bobI`` as ``bobi`` and ``bobl``) is refused on any key (``several_principals``;
        until review R91 granted on one of theirs in some processes, by their hash seed)."""
        who, act = ("an agent", "issue") if issuing else ("a sub-agent", "delegate")
        principals = principals_named(self.policy, name)
        if len(principals) > 1:
            message = (
                f"{several_principals(name, principals, f'{who} named')}: {act} under a name that "
                "reads as one principal at most"
            )
        else:
            principal = principals[0] if principals else None
            own = None if principal is None else self.policy.principal_dids.get(principal)
            if own is None or own == key.did:
                return None
            message = (
                f"{who} named {name} on key {key.did} would act, and be recorded, as principal {principal}, "
                f"whose key in the policy is {own}: {act} under a name the policy does not give another "
                f"key, or to {principal}'s own key"
            )
        refused = Denied(message)
        refused.finding = _finding(
            FindingKind.IMPLICIT_TRUST_INHERITANCE,
            "inherited_identity",
            message,
            "name the agent with a name the policy does not give another key",
        )
        return refused

    def _check_free_name_form(self, name: str, whose: str) -> None:
        """``InputError`` (nothing written, nothing audited, as for a name of mixed scripts) for a
        free ``name`` (one no principal's reads as) that is not in NFKC form
        (``check_canonical_name``): the form registered on the store is the one compared
        (since review R70)."""
        if not name.isascii() and principal_named(self.policy, name) is None:
            check_canonical_name(name, whose)

    def _read_alike(self, name: str, *, issuing: bool = False) -> Denied | None:
        """The refusal (``Denied``, ``authority_chain_opacity``/``name_reads_alike``) of a grant
        under ``name`` when it reads as, and is not, a name this Gate granted before (one of the
        last ``AGENT_NAMES_KEPT``; ``_confusables.readings``: ``heIper`` and ``helper``,
        ``rnallory-bot`` and ``mallory-bot``): an approver and a reader of the audit log would
        take the two agents for one. Else ``None``; a name that reads as a principal's is the
        principal rule's (``_borrowed_name``). Until review R69 free names were compared with
        nothing. A name granted before is one look-up; a new one, its readings (computed once,
        ``readings``' cache) and two look-ups. This Gate's memory decides: the names other
        processes granted on the store are compared as the grant is recorded (``_claim_name``).
        A name that reads as two granted before (``bobI`` as ``bobi`` and ``bobl``) is told the
        first of them granted on the store, the first in code point order among those granted in
        the same second, as ``AgentNames.claim`` tells it after a restart or in another process:
        the refusal asks the store which (``_first_read_as``). Until review R91's second reading
        the order of a set of readings chose, which each process's hash seed set; until its third
        the first in code point order, whenever each was granted (``bobi`` granted after ``bobl``
        was named by this Gate, ``bobl`` after a restart); until its fourth the first of this
        Gate's own names (``bobi``, granted here after another process granted ``bobl``, was
        named by this Gate, ``bobl`` by any other and after a restart)."""
        if name in self._agent_names or principal_named(self.policy, name) is not None:
            return None
        held = [self._name_readings[key] for key in _confusables.readings(name) if key in self._name_readings]
        if not held:
            return None
        return self._reads_as(name, self._first_read_as(name, min(held)[1]), issuing=issuing)

    def _first_read_as(self, name: str, kept: str) -> str:
        """The name granted before that a refusal of ``name`` (``_read_alike``) tells: the first
        granted on the store of those it reads as, by any process (``AgentNames.earlier``, read
        here, on the refusal path only: a name granted costs no statement more). ``kept``, the
        first of this Gate's own names it reads as (``_remember_name`` keeps the store's time of
        each name's first grant), where the Gate has not opened the store's record of the names
        or the store cannot be read: the refusal stands, and a store that cannot be read fails
        its audit entry (``_audited_refusal``)."""
        names = self._names_on_store
        if names is None:
            return kept
        try:
            with self.store.transaction(immediate=False) as tx:
                earlier = names.earlier(tx, name, _confusables.readings(name))
        except StoreError:
            return kept
        return kept if earlier is None else earlier

    def _reads_as(self, name: str, earlier: str, *, issuing: bool) -> Denied:
        """The refusal (``Denied``, ``name_reads_alike``) of a grant under ``name``, which reads
        as ``earlier``, a name granted before (``_read_alike``, ``_claim_name``)."""
        who, act = ("an agent", "issue") if issuing else ("a sub-agent", "delegate")
        message = (
            f"{who} named {name!r} reads as {earlier!r}, an agent granted before on this store "
            f"(Unicode's confusables{_first_difference(name, earlier)}): an approver and a reader of "
            f"the audit log would take one for the other; {act} under {earlier!r} itself if the same "
            "agent is meant, else under a name that reads apart from it"
        )
        refused = Denied(message)
        refused.finding = _finding(
            FindingKind.AUTHORITY_CHAIN_OPACITY,
            "name_reads_alike",
            message,
            "name the agent with a name that reads apart from the agents' names granted before",
        )
        return refused

    def _remember_name(self, name: str, first_at: int | None) -> None:
        """Keep how ``name``, just granted, reads (``_read_alike``), as the latest, with
        ``first_at``, when the store says it was first granted (``_claim_name``; ``None`` where
        this Gate claimed nothing: a name it keeps, which keeps its time, or a principal's); past
        ``AGENT_NAMES_KEPT`` names the oldest is forgotten. A principal's name is not kept: the
        policy holds it."""
        kept = self._agent_names
        if name in kept:
            kept[name] = kept.pop(name)
            return
        if principal_named(self.policy, name) is not None:
            return
        keys = kept[name] = _confusables.readings(name)
        held = (int(time.time()) if first_at is None else first_at, name)
        for key in keys:
            self._name_readings.setdefault(key, held)
        while len(kept) > AGENT_NAMES_KEPT:
            oldest = next(iter(kept))
            for key in kept.pop(oldest):
                if key in self._name_readings and self._name_readings[key][1] == oldest:
                    del self._name_readings[key]

    def _refuse_revoked(self, parent: AgentIdentity) -> None:
        """Raise ``Revoked`` when a grant of ``parent``'s chain is revoked: it hands nothing on
        (``revoked_finding``, the authority engine's wording, for the delegating holder)."""
        revoked = self.grants.revoked(parent.chain.ids)
        if revoked:
            finding = revoked_finding(parent.chain.ids, revoked, delegator=parent.name)
            refused = Revoked(finding.message)
            refused.finding = finding
            raise refused

    def _record_grant(
        self,
        chain: Chain,
        principal: str,
        chain_hash: str,
        resource: str,
        reason: str,
        *,
        parent: AgentIdentity | None = None,
        ignored: Collection[str] = (),
        name: str,
    ) -> tuple[int, int | None]:
        """Record a grant and its ``allow`` audit entry (by ``principal``, on ``resource``
        ``agent:NAME``) in one transaction, one commit; returns the entry's index and, where
        ``name`` was claimed, when it was first granted (``_claim_name``). For a grant
        delegated by ``parent``, raises ``Revoked`` (nothing written) when the parent's chain was
        revoked meanwhile: revocation is read again in that transaction, so no allow follows a
        revocation that has returned. ``ignored``: the notes on recorded grants read for this
        delegation and not handed on (``_delegated_before``), kept as further reasons. ``name``,
        the agent's, is claimed in the same transaction (``_claim_name``): ``Denied`` (nothing
        written) when it reads as a name granted before on the store."""
        names = None
        first_at: int | None = None
        if name not in self._agent_names and principal_named(self.policy, name) is None:
            names = self._names_part()  # made before the transaction: SQLite's DDL would wait for its lock
        with self._decision_transaction() as tx, self.grants.within(tx):
            if parent is not None:
                self._refuse_revoked(parent)
            if names is not None:
                first_at = self._claim_name(names, tx, name, issuing=parent is None)
            record(self.grants, chain)
            self._after_commit(functools.partial(self._recorded_chain, chain.id))
            index = self.audit.append(
                {
                    "kind": "allow",
                    "principal": principal,
                    "chain_hash": chain_hash,
                    "policy_hash": self.policy.digest or None,
                    "resource": resource,
                    "reasons": [reason, *ignored],
                },
                tx,
            )
        return index, first_at

    def _names_part(self) -> AgentNames:
        """The store's record of the free agent names granted (``agentgate_agent_names``), opened
        at this Gate's first grant of a name it has not granted: a Gate that only decides never
        needs it. Raises ``StoreError`` where the table is missing and this role may not create
        it (a least-privilege PostgreSQL role before the owner's ``agentgate store init`` of
        this version: docs/operations.md, Upgrading); the grant is then not made."""
        if self._names_on_store is None:
            self._names_on_store = AgentNames(self.store)
        return self._names_on_store

    def _claim_unknown_name(self, name: str) -> int | None:
        """Claim ``name`` for a grant handed on again (``_delegated_before``), in a transaction of
        its own, when this Gate has not granted it (``_claim_name``; ``Denied`` when it reads as
        another); returns when it was first granted, ``None`` where nothing was claimed. The
        grant's signed purpose names its name, so its first grant claimed it unless a version
        before review R69 made it: until review R69 such a name was kept as this Gate's
        (``_remember_name``) unclaimed, and later grants under it, which then skip the claim, left
        the store without it: another Gate granted a name that reads as it."""
        if name in self._agent_names or principal_named(self.policy, name) is not None:
            return None
        names = self._names_part()
        with self._decision_transaction() as tx:
            return self._claim_name(names, tx, name, issuing=False)

    def _claim_name(self, names: AgentNames, tx: Transaction, name: str, *, issuing: bool) -> int:
        """Claim ``name``'s readings in ``tx``, the grant's transaction (``AgentNames.claim``);
        returns when the store says ``name`` was first granted (now, or at an earlier grant by
        any process). ``Denied`` (``name_reads_alike``, the transaction then rolled back) when
        another name granted on the store, by any process or by this Gate before a restart,
        holds one: until review R69 only this Gate object's own memory was compared
        (``_read_alike``)."""
        claimed = names.claim(tx, name, _confusables.readings(name), int(time.time()))
        if claimed.earlier is not None:
            raise self._reads_as(name, claimed.earlier, issuing=issuing)
        return claimed.first_at

    def _check_delegation_rule(
        self, parent: AgentIdentity, caps: list[Capability], seconds: int, budget: int | None, asked: int
    ) -> str:
        """The unit of the budget a grant delegated from ``parent`` carries: its parent's, which a
        child keeps; where the parent's grant carries none, the unit of the first delegation rule,
        in the order the policy declares its roles, that admits the grant in it
        (``PolicyIndex.delegation_budget_unit``), else ``usd_micros``. Until review R85 it was
        ``usd_micros`` whatever the rule: a budget of 5 under a rule of 10 ``calls`` was 5
        micro-dollars, and the sub-agent's tool calls ran without limit; until review R85b it was
        the first rule's unit, admitting or not, so the order of the parent's roles could refuse
        a budget another of its rules allowed.

        Refuses (``ScopeCreep``, with the finding) a delegation the policy's rules for the
        parent's roles do not allow (``PolicyIndex.delegation_fault``, which decisions ask of each
        link of a chain presented too): also one with a budget when the parent's is in another
        unit than the rule's, which no child of it can carry (``delegation_budget_above_policy``,
        naming both units). ``asked``: the TTL asked, of which ``seconds`` is what the parent's
        remaining life leaves."""
        held = parent.chain.tip.budget  # a link below one with a budget carries one (attenuation)
        unit = (
            held.unit
            if held is not None
            else self.index.delegation_budget_unit(parent.did, caps, seconds, budget)
        )
        unit = unit or "usd_micros"
        fault = self.index.delegation_fault(
            parent.did,
            parent.chain.root.audience,
            caps,
            seconds,
            budget,
            parent.name,
            asked_s=asked,
            unit=unit,
        )
        if fault is not None:
            error = ScopeCreep(fault.message)
            error.finding = fault
            raise error
        return unit

    @_serialized
    def revoke(
        self, grant: AgentIdentity | Chain | str, *, by: str = "operator", reason: str = ""
    ) -> Revocation:
        """Revoke a grant and, through it, every grant below it; audited. Returns the grant id
        and whether it was revoked already (``Revocation.already``): then nothing is written, as
        ``agentgate grant revoke`` reports ``already_revoked`` (until review R53 each call wrote
        another ``revoke`` entry, with a later time and another reason, for the same grant). The
        approval requests the revocation makes void are closed in its transaction, each with a
        ``deny`` entry (``_void_revoked``).

        Raises ``TokenFormatError`` for a ``grant`` that is none, ``InputError`` for a ``by`` or
        ``reason`` that is not text, or a ``reason`` longer than ``MAX_FREE_TEXT`` (1,000)
        characters; nothing is written then, and there is no span (until review
        R57 a ``grant`` that is none left an ERROR ``revoke grant`` span linking no entry)."""
        expect(by, str, "by", "text (who revokes)")
        expect(reason, str, "reason", "text")
        storable_reason(reason)  # one longer than the row and entry keep: refused before the span
        grant_id = revoked_id(grant.chain if isinstance(grant, AgentIdentity) else grant)
        with self._revoke_span(by) as span:
            # The revocation and its audit entry: one transaction, so neither exists without the
            # other. Read in that transaction, under the audit log's lock: two revokes at once
            # write one entry.
            index: int | None = None
            with self._decision_transaction() as tx, self.grants.within(tx):
                already = bool(self.grants.revoked([grant_id]))
                if not already:
                    revoke(self.grants, grant_id, reason=reason)
                    index = self.audit.append(revocation_entry(grant_id, by, reason), tx)
                    self._void_revoked([grant_id], tx)
            self._forget_revoked([grant_id])
            self._revoked_on(span, grant_id, already, index)
        return Revocation(grant_id, already=already)

    def revoke_holder(
        self, holder: PublicKey | str, *, by: str = "operator", reason: str = ""
    ) -> HolderRevocation:
        """Revoke every grant this gate's store records for the key ``holder`` (a leaked agent
        key: ``authority.revoke_holder``), each with its ``revoke`` entry, in one transaction, with
        the approval requests they make void (``_void_revoked``).
        Grants to the key never recorded in this store are not reached: remove the key from the
        policy and restart for those (docs/operations.md, Rotating keys). Raises ``KeyFileError``
        for a ``holder`` that is no did:key, ``InputError`` for a ``by`` or ``reason`` that is
        not text, or a ``reason`` longer than ``MAX_FREE_TEXT`` characters; nothing is written then, and there is no span (until review R57 a ``holder``
        that is no did:key left an ERROR ``revoke holder`` span)."""
        expect(by, str, "by", "text (who revokes)")
        expect(reason, str, "reason", "text")
        storable_reason(reason)  # one longer than the row and entry keep: refused before the span
        if not isinstance(holder, PublicKey):
            expect(holder, str, "holder", "a did:key or a PublicKey")
            holder = PublicKey.from_did(holder.strip())
        with self._revoke_span(by, holder=True) as span:
            scan = scan_holder(self.grants, holder)  # every row read before either lock is taken
            # The revoking transaction holds the store lock, as every decision's does (until
            # review R70 it wrote while another thread's decision held it); the scan does not:
            # a whole-table read would hold every decision.
            with ends_held(), self._store_lock, self._decision_transaction() as tx, self.grants.within(tx):
                done = revoke_holder(self.grants, holder, reason=reason, scan=scan)
                indexes = [self.audit.append(revocation_entry(g, by, reason), tx) for g in done.revoked]
                self._void_revoked(done.revoked, tx)
            self._forget_revoked([*done.revoked, *done.already])
            if span.is_recording():
                span.set_attributes(
                    {
                        "agentgate.grant.audience": done.holder,
                        "agentgate.revoke.revoked_count": len(done.revoked),
                        "agentgate.revoke.already_count": len(done.already),
                    }
                )
                # One span per grant revoked, as for Gate.revoke: each links its own entry.
                for grant_id, index in zip(done.revoked, indexes, strict=True):
                    with self._revoke_span(by) as each:
                        self._revoked_on(each, grant_id, False, index)
        return done

    def _forget_revoked(self, grant_ids: Collection[str]) -> None:
        """Drop from ``delegations`` every delegation whose chain holds one of ``grant_ids``
        (revoked: its own grant or an ancestor's), with the sub-agent's key: until review R60 a
        revoked sub-agent stayed until its grant expired. Asked once the revocation is committed."""
        dead = set(grant_ids)
        with self._lock:
            self._delegations[:] = [d for d in self._delegations if dead.isdisjoint(d[1].chain.ids)]

    def _revoke_span(self, by: str, *, holder: bool = False) -> AbstractContextManager[Span]:
        """The span of one revocation (``revoke_span``); none while nothing could record it."""
        if self._untraced():
            return nullcontext(INVALID_SPAN)
        return revoke_span(recordable(by), holder=holder, tracer=self.tracer)

    def _revoked_on(self, span: Span, grant_id: str, already: bool, index: int | None) -> None:
        """The revocation of ``grant_id`` recorded on ``span``: whether it was revoked before, how
        many recorded grants below it are dead with it (a read, made only for a span that
        records), and its ``revoke`` entry's index."""
        if span.is_recording():
            below = len(self.grants.descendants(grant_id))
            record_revocation(span, grant_id, already=already, descendants=below, audit_index=index)
