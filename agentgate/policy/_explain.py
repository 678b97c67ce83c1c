"""Explain a decision in words a person reads once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.keys import shown_path
from agentgate.policy._index import PolicyDecision, PolicyIndex, _shown, named_principal
from agentgate.policy._load import describe_constraint, json_text

_VERDICT = {
    Outcome.ALLOW: "ALLOW",
    Outcome.DENY: "DENY",
    Outcome.APPROVAL_REQUIRED: "APPROVAL REQUIRED",
}


def _json(value: Any) -> str:
    """``value`` as JSON, as ``--args`` and the rule's constraints are written (``{"a": 1}``, not
    Python's ``{'a': 1}``, until review R58); where it has no JSON text, ``_shown``'s words: an
    integer of more than 4,300 digits, which Python refuses to write in decimal, or a value no
    JSON holds (from a Python caller)."""
    try:
        return json_text(value)
    except (ValueError, TypeError):
        return _shown(value)


def explain(index: PolicyIndex, principal: str, call: Call) -> tuple[PolicyDecision, str]:
    """Evaluate ``call`` by ``principal`` and return the decision with a plain-text account of it.

    A principal whose key another declared before it holds too (lint's ``principal_without_key``)
    is judged as that other one, as the Gate judges every call signed with the key: until review
    R82 ``--as`` the second one's name answered by its own roles, an allow the Gate never gives."""
    policy = index.policy
    did = policy.principal_dids.get(principal) if isinstance(principal, str) else None
    decision = index.evaluate(did or principal, call)
    if did is not None and decision.principal not in (None, principal):
        note = (
            f"{principal}'s key is {decision.principal}'s too, declared before it: the Gate judges every "
            f"call signed with it as {decision.principal}'s (lint: principal_without_key)"
        )
        decision = replace(decision, reasons=(note, *decision.reasons))
    # A name that is no principal of the policy is the caller's text: shown with its line breaks
    # and escapes escaped (as a path is), so that it cannot add a line to the account (review R55).
    # A name that is not text (from a Python caller) is named as the reason names it, its type
    # said: until review R93 ``b"p"`` read as "DENY: p", and ``123`` as "DENY: 123", naming a
    # principal of the policy ("p", "123") that is allowed the call.
    who = decision.principal or (
        shown_path(principal) if isinstance(principal, str) else named_principal(principal)
    )
    args = "{" + ", ".join(f"{_json(name)}: {_json(value)}" for name, value in call.args.items()) + "}"
    lines = [f"{_VERDICT[decision.outcome]}: {who} calling {call.resource} with {args}"]
    if decision.principal is not None:
        lines.append(f"  roles held: {_roles_held(index, decision.principal)}")
    through = index.allowed_through(did or principal, call) if decision.rule is not None else ()
    if decision.rule is not None:
        cap = decision.rule.capability
        lines.append(f"  rule: {decision.rule}")
        if decision.held_role is not None and decision.held_role != decision.rule.role:
            lines.append(
                f"  held through: role {decision.held_role}, which inherits role {decision.rule.role}"
            )
        if len(through) > 1:
            # Until review R60 only the deciding role was named, and a principal holding another
            # role that allows the call too (on another budget) read as if it held only the first.
            lines.append(
                f"  decided by role {decision.held_role}: the first of {decision.principal}'s roles, "
                "in the order its entry in principals lists them, whose rules allow the call"
            )
        if cap.constraints:
            lines.append(
                "  constraints checked: " + "; ".join(describe_constraint(a, c) for a, c in cap.constraints)
            )
        else:
            lines.append("  constraints checked: none (the rule allows any arguments)")
    if decision.budget is not None:
        lines.append(
            f"  budget of role {decision.held_role}: {decision.budget.limit} {decision.budget.unit} per grant"
        )
    for held, rule in through[1:]:
        budget = index.policy.document.roles[held].budget
        terms = f"{budget.limit} {budget.unit} per grant" if budget is not None else "no budget"
        lines.append(f"  also allowed through role {held}: {rule}; budget of role {held}: {terms}")
    for q in decision.quotas:
        lines.append(f"  quota {q.name} ({q.subject}): {q.limit} {q.unit} per {q.window_s}s")
    if decision.approval is not None:
        a = decision.approval
        lines.append(
            f"  approval: gate {a.gate} needs {a.quorum} of {', '.join(a.approvers)} to sign off within {a.expiry_s}s"
        )
    elif decision.outcome is Outcome.ALLOW:
        lines.append("  approval: none needed")
    lines.append("  why:")
    lines.extend(f"    - {reason}" for reason in decision.reasons)
    if decision.outcome is Outcome.DENY:
        # A rule can allow a call that is still denied: no approval its gates ask for could be
        # valid. Saying "not explicitly allowed" there would contradict the reason just shown.
        ruled = any(rule.allowed_by in decision.reasons for rules in policy.rules.values() for rule in rules)
        lines.append(
            "    - a rule allows it, but a call no approval can be given for is denied"
            if ruled
            else "    - anything not explicitly allowed is denied"
        )
    return decision, "\n".join(lines)


def _roles_held(index: PolicyIndex, principal: str) -> str:
    """The roles ``principal`` holds, each once, in the order ``evaluate`` reads them: those it
    holds itself as named, those it holds only through one of them marked so
    (``base (inherited through clerk)``); ``none`` without any."""
    held = index.policy.document.principals[principal].roles
    shown = []
    for role in index.policy.principal_roles(principal):
        if role in held:
            shown.append(role)
        else:
            via = next(h for h in held if role in index.policy.role_closure(h))
            shown.append(f"{role} (inherited through {via})")
    return ", ".join(shown) or "none"
