"""``Gate``: the composition root that the integrations and the CLI use.

One tool call or model call, end to end (docs/architecture.md):

1. ``authorize``: the policy's rule for the caller (``policy.PolicyIndex``), then the authority
   decision with the agent's own key in hand (``authority.Authority.decide_held``: chain
   verified, holder binding, nothing revoked, approval gate), then, in ONE store
   transaction, the budget reserved against every grant of the chain (``store.ledger``), a
   signed approval consumed (``store.approvals``) and the decision appended to the audit log
   (``store.audit``). If that transaction fails, the call does not run.
2. ``run`` / ``arun``: the call runs under the scheduler (``tasks``: limits, deadline, safe
   retries, breakers) inside an OpenTelemetry span; its outcome entry and the budget settlement
   (committed at the actual usage, or released) are written in one transaction, carried by the
   next decision's transaction or committed by a background thread within ``linger_s`` (20 ms).
   A crash in that window can lose an outcome entry, never a decision: the reservation then stays
   held, so a budget is never overspent. ``flush()`` commits them at once.

The gate composes; each rule lives in the part that owns it. A refusal is data: an
``Authorization`` that is not allowed, whose ``explain()`` tells the agent what was refused and
why, without tokens, keys or argument values.
Where each step lives: ``Gate`` (``_gate``: its making, ``close``, ``authorize`` and the
evidence) inherits one part per concern, each in a module of its own: ``_delegation`` (grants
issued, delegated and revoked), ``_approval_gates`` (approval requests, the votes of a quorum, an
approval consumed or put back), ``_recording`` (a decision's audit entry: refusals, and allows with
their reservations and quotas), ``_costs`` (what a call costs, which budgets can meter it),
``_running`` (``run``/``arun`` under the scheduler, inside the call's span), ``_settlement`` (the
outcomes and their budget settlement, carried by the next decision or committed in the background)
and ``_dispatching`` (model calls through an attached dispatcher). What the parts share:
``_checks`` (the types arguments are checked against) and ``_lock`` (the store lock). Beside them,
the values: ``_authorization`` (``Authorization``, ``AgentIdentity``, ``Verdict``), ``_approval``
(``Approval``), ``_outcomes`` (the outcomes waiting to be committed), ``_records`` (the text the
audit log keeps) and ``_config`` (the scheduler's configuration from a policy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgate._lazy import lazy_exports

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from agentgate.gate._approval import Approval, approval_call_hash
    from agentgate.gate._authorization import AgentIdentity, Authorization, Verdict
    from agentgate.gate._config import scheduler_config
    from agentgate.gate._delegation import DELEGATIONS_PURGE_S, MAX_AGENT_NAME_CHARS
    from agentgate.gate._gate import Gate
    from agentgate.gate._outcomes import MAX_ERROR_DETAIL

# ``Gate`` brings the dispatcher, the scheduler and OpenTelemetry; the CLI uses the small parts
# (``Approval``, ``_records``) without them: each name is imported from its module on first use.
_EXPORTS: dict[str, str] = {
    "DELEGATIONS_PURGE_S": "agentgate.gate._delegation",
    "MAX_AGENT_NAME_CHARS": "agentgate.gate._delegation",
    "MAX_ERROR_DETAIL": "agentgate.gate._outcomes",
    "AgentIdentity": "agentgate.gate._authorization",
    "Approval": "agentgate.gate._approval",
    "Authorization": "agentgate.gate._authorization",
    "Gate": "agentgate.gate._gate",
    "Verdict": "agentgate.gate._authorization",
    "approval_call_hash": "agentgate.gate._approval",
    "scheduler_config": "agentgate.gate._config",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "DELEGATIONS_PURGE_S",
    "MAX_AGENT_NAME_CHARS",
    "MAX_ERROR_DETAIL",
    "AgentIdentity",
    "Approval",
    "Authorization",
    "Gate",
    "Verdict",
    "approval_call_hash",
    "scheduler_config",
]
