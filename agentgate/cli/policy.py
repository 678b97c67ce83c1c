"""``agentgate policy lint | explain | schema``.

Exit codes: lint 0 clean (warnings allowed), 1 any error finding, 2 invalid file; explain 0
allow, 1 deny, 3 approval required, 2 invalid input. The parser lives apart
(agentgate/cli/_policy_parser.py), so that help loads none of the policy package these handlers
use; ``register`` is named here too, for a caller that registers this group by its module.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentgate.capabilities import Call
from agentgate.cli._common import escaped_once, json_object, say_written, shown_policy, write_json
from agentgate.cli._policy_parser import register as register
from agentgate.errors import CapabilityError, InputError, PolicyError
from agentgate.findings import Severity
from agentgate.keys import replace_file, shown_path
from agentgate.policy import (
    Budget,
    Outcome,
    Policy,
    PolicyIndex,
    RuleRef,
    explain,
    json_schema_text,
    lint,
    load_policy,
)
from agentgate.policy._index import PolicyDecision
from agentgate.policy._load import describe_constraint


def _lint(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        if args.json:
            write_json(
                {"file": args.file, "valid": False, "error": _error_dict(exc), "findings": []}, indent=None
            )
            return 2
        raise  # one line, escaped once, as main writes every error (a long one cut in its middle)
    findings = lint(policy)
    errors = sum(f.severity is Severity.ERROR for f in findings)
    if args.json:
        out = {
            "file": args.file,
            "valid": True,
            "findings": [f.as_json() for f in findings],
        }
        write_json(out)
    else:
        # Messages quote the policy's own text (a prefix, an argument name), most of it already
        # escaped (repr, JSON): what is still unprintable is escaped, once, so a policy under review
        # cannot forge or erase lines of its own lint report.
        for f in findings:
            print(escaped_once(f"{f.where()}: {f.severity}: {f.kind}/{f.code}: {f.message}"))
            if f.hint:
                print(f"    fix: {escaped_once(f.hint)}")
        warnings = len(findings) - errors
        print(f"{escaped_once(args.file)}: {errors} error(s), {warnings} warning(s)")
    return 1 if errors else 0


def _error_dict(exc: PolicyError) -> dict[str, Any]:
    return {
        "message": exc.message,
        "file": exc.file,
        "line": exc.line,
        "column": exc.column,
        "expected": exc.expected,
        "hint": exc.hint,
    }


def _explain(args: argparse.Namespace) -> int:
    policy = shown_policy(args.file)
    call_args = json_object(args.args)
    try:
        call = Call.tool(args.tool, call_args)
    except CapabilityError as exc:
        if args.json:
            refused = PolicyDecision(Outcome.DENY, None, f"tool:{args.tool}", reasons=(str(exc),))
            write_json(_explain_json(policy, refused), indent=None)
        else:
            print(f"DENY: {escaped_once(str(exc))}")
        return 1
    index = PolicyIndex(policy)
    decision, text = explain(index, args.principal, call)
    if args.json:
        through = index.allowed_through(decision.principal or args.principal, call)
        write_json(_explain_json(policy, decision, through), indent=None)
    else:
        print("\n".join(escaped_once(line) for line in text.split("\n")))
    return {Outcome.ALLOW: 0, Outcome.DENY: 1, Outcome.APPROVAL_REQUIRED: 3}[decision.outcome]


def _explain_json(
    policy: Policy, decision: PolicyDecision, through: tuple[tuple[str, RuleRef], ...] = ()
) -> dict[str, Any]:
    """Every fact the text of ``policy explain`` shows, as JSON: the roles held, the rule and the
    constraints it checked, the budget, every role held through which a rule allows the call
    (``through``: ``PolicyIndex.allowed_through``), each quota with its limit, the approval gate
    with its approvers, quorum and expiry, and the reasons."""
    rule = decision.rule
    approval = decision.approval
    return {
        "decision": decision.outcome.value,
        "principal": decision.principal,
        "resource": decision.resource,
        "roles_held": list(policy.principal_roles(decision.principal)) if decision.principal else [],
        "role": decision.role,
        "held_role": decision.held_role,
        "rule": str(rule) if rule else None,
        "constraints": [describe_constraint(a, c) for a, c in rule.capability.constraints] if rule else [],
        "budget": _budget(decision.budget),
        "allowed_through": [
            {
                "held_role": held,
                "role": r.role,
                "rule": str(r),
                "budget": _budget(policy.document.roles[held].budget),
            }
            for held, r in through
        ],
        "approval": approval.gate if approval else None,
        "approvers": list(approval.approvers) if approval else [],
        "quorum": approval.quorum if approval else None,
        "approval_expiry_s": approval.expiry_s if approval else None,
        "quotas": [q.name for q in decision.quotas],
        "quota_limits": [
            {"name": q.name, "subject": q.subject, "limit": q.limit, "unit": q.unit, "window_s": q.window_s}
            for q in decision.quotas
        ],
        "reasons": list(decision.reasons),
    }


def _budget(budget: Budget | None) -> dict[str, Any] | None:
    return {"limit": budget.limit, "unit": budget.unit} if budget is not None else None


def _schema(args: argparse.Namespace) -> int:
    text = json_schema_text()
    if args.out:
        try:  # whole or not at all, never through a symbolic link or into a FIFO
            replace_file(Path(args.out), text.encode("utf-8"), 0o644)
        except OSError as exc:
            raise InputError(f"{args.out}: cannot write the schema: {exc.strerror or exc}") from None
        say_written(f"wrote {shown_path(args.out)}")
    else:
        sys.stdout.write(text)
    return 0
