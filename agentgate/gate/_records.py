"""Text as the audit log may keep it: the arguments it keeps in clear, reasons with values that
are not loggable replaced, invalid Unicode escaped, why a call that ran once is not run again,
and a revocation's entry and the entries of the approval requests it makes void."""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from typing import Any

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.policy._index import undeclared_name
from agentgate.store.once import OnceState

# The arguments agentgate itself gives a model call (the LangGraph middleware, the gateway) and a
# GPU lease (GatedBroker): request settings, never a prompt or a tool's input. The audit log and an
# approval request show them in clear, so an approver sees the ``max_tokens`` asked for; any other
# argument of such a call is dropped, as a tool's arguments the policy does not mark loggable.
PARAMETERS_IN_CLEAR = {
    "model": ("max_tokens", "priority"),
    "gpu": ("count", "priority", "ttl_s", "grace_s", "timeout_s", "hold_s", "request"),
}


_HELD = re.compile(r" \(it holds .*\)$", re.S)
"""The list of every capability the grant holds that the authority engine's refusal of a call no
capability covers ends with (``the grant does not cover tool:other invoke (it holds ...)``)."""


def without_held(reason: str) -> str:
    """``reason`` without the list of every capability the grant holds (``_HELD``): it is more
    than the bound the call crossed, namely the other tools' rules, with what the grant pins for
    an argument the framework injects (a key, an account). What the model is told and the text
    of a raised ``Denied`` leave it out; the audit entry, and the ``Decision`` a ``Denied``
    carries, keep it."""
    return _HELD.sub("", reason)


UNDECLARED_NAME = "<an undeclared argument name>"
"""What ``redact_reasons`` writes for the quoted name of an argument the tool does not declare."""
UNRENDERED_REASON = "<a reason quoting an argument that is not loggable>"
"""What ``redact_reasons`` writes for a reason whose argument value has no ``repr``."""
NOT_LOGGABLE = "<not loggable>"
"""What ``redact_reasons`` writes for the value of an argument the policy does not log."""
PLACEHOLDERS = (NOT_LOGGABLE, UNDECLARED_NAME, UNRENDERED_REASON)
"""Every text ``redact_reasons`` puts in a reason's place or part (``approval sign --store``
matches a payload's reasons against the log's by them)."""


UNCOUNTED = re.compile(r"approval (?:not counted|by \S+ not counted|of request \S+ not used): ")
"""The start of every reason the Gate gives for an approval presented that did not count
(``_approval_gates``): ``approval not counted: ...``, ``approval by DID not counted: ...``,
``approval of request ID not used: ...``. The LangGraph payload of a call asked again ends with
them (``_asking``), after its request's own reasons; ``approval sign --store`` lets them follow
the reasons it checks against the request's first ``approval_required`` entry, which cannot
hold them (a later entry of the request does)."""


TALLY = re.compile(r"approval quorum: \d+ of \d+ given; ")
"""The start of the reason a call waiting for a quorum above one gives (``quorum_tally``)."""


def quorum_tally(given: int, quorum: int) -> str:
    """The reason a call of a gate of ``quorum`` above one gives while it waits: how many of the
    approvals it needs are ``given`` (the votes that count under the policy in force), and how
    many more are needed (review R73: until then the reasons named the gate and its approvers
    only, and "1 of 2" was to be read from the payload's ``approved_by``). Added to the answer,
    never to the log, which holds each vote as an ``approval_given`` entry of its own (a declined
    call's ``deny`` entry leaves it out: ``untallied``); and left out of a LangGraph payload asked
    again (``_asking``), which shows ``approved_by``."""
    if given >= quorum:  # met, not yet used: the policy lowered the quorum to the votes in
        return (
            f"approval quorum: {given} of {quorum} given; met: an approval of the request presented uses it"
        )
    return f"approval quorum: {given} of {quorum} given; {quorum - given} more needed"


def untallied(reasons: Iterable[str]) -> tuple[str, ...]:
    """``reasons`` without the tally of a call waiting for a quorum (``quorum_tally``): those a
    refusal of that call records (``Gate.decline``). Until review R73's review the ``deny`` entry
    of a declined request of a quorum above one held "approval quorum: 1 of 2 given; ...", which
    is the waiting answer's alone."""
    return tuple(reason for reason in reasons if not TALLY.match(reason))


def redact_reasons(
    reasons: Iterable[str],
    args: Mapping[str, Any],
    loggable: Iterable[str],
    declared: Container[str] | None = None,
) -> list[str]:
    """Reasons as the audit log may keep them: a value of an argument the policy does not mark
    loggable, quoted by a rule's explanation (``name=value``), is replaced by a placeholder; so is
    the quoted name of an argument the tool does not declare (with ``declared``, the tool's
    argument names): a model can write anything as a name, a secret too."""
    clear = set(loggable)
    out = []
    # As the policy index names them (``undeclared_name``).
    undeclared = (
        [undeclared_name(name) for name in args if name not in declared] if declared is not None else []
    )
    for reason in reasons:
        for quoted_name in undeclared:
            reason = reason.replace(quoted_name, UNDECLARED_NAME)
        # Only the arguments a reason names are rendered: a value nested thousands deep has no
        # repr (RecursionError), and a large one costs its repr on every refusal.
        for name, value in args.items():
            # A rule names only text arguments: another name (``10**5000``, a tuple nested deep)
            # is never rendered (its text was a bare ValueError or RecursionError out of the Gate).
            if type(name) is not str or name in clear or f"{name}=" not in reason:
                continue
            try:
                written = f"{name}={value!r}"
            except RecursionError:
                reason = UNRENDERED_REASON
                break
            reason = reason.replace(written, f"{name}={NOT_LOGGABLE}")
        out.append(reason)
    return out


def recordable(text: str) -> str:
    """``text`` as the audit log can hold it: unchanged, or with what is not valid Unicode (a
    lone surrogate from a hostile argument or name) escaped, so a refusal is still recorded."""
    if text.isascii():  # the usual case, known without encoding a copy
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def revocation_entry(grant_id: str, by: str, reason: str) -> dict[str, Any]:
    """The audit entry of a revocation of ``grant_id`` by ``by`` (a name, or a DID), written in the
    revocation's own transaction by every revoker (``Gate.revoke``, ``agentgate grant revoke``)."""
    return {
        "kind": "revoke",
        "principal": recordable(by),
        "chain_hash": grant_id,
        "reasons": [recordable(reason)] if reason else [],
    }


ASKED_FIELDS = ("principal", "chain_hash", "rule", "resource", "args_digest", "args")
"""What the ``deny`` entry closing an approval request (superseded, or void by a revocation) takes
from its ``approval_required`` entry: the call it named, as asked."""


def voided_request_reason(approval_id: str, grant_id: str) -> str:
    """Why a revocation of ``grant_id`` closed approval request ``approval_id``."""
    return f"approval request {approval_id} is void: grant {grant_id} was revoked"


def voided_request_entry(
    asked: AuditEntry, asked_index: int, reason: str, policy_hash: str | None
) -> dict[str, Any]:
    """The ``deny`` entry that closes an approval request made void by a revocation, written in
    the revocation's transaction by every revoker (``Gate.revoke``, ``Gate.revoke_holder``,
    ``agentgate grant revoke``): the call its ``approval_required`` entry (``asked``, at
    ``asked_index``) named, refused for ``reason`` (``voided_request_reason``), referring to it, as
    a superseded request's ``deny`` does."""
    return {
        **{name: getattr(asked, name) for name in ASKED_FIELDS},
        "kind": "deny",
        "policy_hash": policy_hash,
        "reasons": [recordable(reason)],
        "ref": asked_index,
    }


def ran_before(call: Call, state: OnceState, allow_index: int) -> str:
    what = f"this {call.resource} call (the same run, call id and arguments)"
    if state == "ok":
        happened = f"already ran to completion (allowed by audit entry {allow_index})"
    elif state == "error":
        happened = (
            f"already ran and failed (allowed by audit entry {allow_index}); it may have had its effect"
        )
    else:
        # Review R58: a worker sharing the store may be running it now (two processes resuming
        # one LangGraph interrupt); until then this said only that its process may have stopped.
        happened = (
            f"was started (allowed by audit entry {allow_index}) and its outcome was never recorded: "
            "it may still be running in another process, or its process stopped while it ran, so it "
            "may have had its effect"
        )
    return f"{what} {happened}; a tool that is not idempotent runs once, so it is not run again"
