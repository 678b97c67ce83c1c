"""What the model is told: a refusal (``_refusal``, ``_explained``), a failure (``_failure``), a call that could
not be decided (``_undecidable``), the question an approval interrupt asks (``_asking``), and
whether a kept result answers a call (``_answers_a_call``, ``_copied``)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace
from typing import Any, TypeVar, cast

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from agentgate.errors import AgentGateError, AuditError, AuthorityError, InputError, StoreError
from agentgate.findings import Finding
from agentgate.gate import Authorization, Gate
from agentgate.gate._records import TALLY, without_held
from agentgate.integrations.langgraph._calls import ToolResult
from agentgate.integrations.langgraph._stops import STOP_KEY, _stop_mark

R = TypeVar("R")


def _answers_a_call(result: object) -> bool:
    """Whether ``result`` is what ``ToolNode`` answers a call with: a ``ToolMessage``, a
    ``Command``, or a list of them (a tool may return one; ``ToolNode`` passes it on as is)."""
    items = result if isinstance(result, list) else [result]
    return bool(items) and all(isinstance(item, ToolMessage | Command) for item in items)


def _copied(kept: ToolResult) -> ToolResult:
    """A kept answer to hand out again (``_answer_again``): each ``ToolMessage`` a copy, not the
    object the run's state already holds; a ``Command`` as it was (immutable: LangGraph applies
    its update again)."""
    if isinstance(kept, list):
        # A list is what a tool may return and ToolNode passes on (``ToolResult`` names the one-item forms).
        return cast(
            ToolResult, [item.model_copy() if isinstance(item, ToolMessage) else item for item in kept]
        )
    return kept.model_copy() if isinstance(kept, ToolMessage) else kept


def _undecidable(tool_call_id: str, name: str, exc: InputError) -> ToolMessage:
    """A call the gate cannot decide never runs, and the model is told why: a registered tool
    whose name is no resource name (``tool:NAME``, in no policy rule), or a tool call without an
    id (``_NO_CALL_ID``). (Arguments the gate cannot digest, such as text that is not valid
    Unicode, are decided and refused by ``Gate.authorize`` itself.) The refusal is recorded as
    a ``deny`` entry first (``GateMiddleware._record_undecidable``)."""
    return ToolMessage(
        content=f"agentgate refused the call: {exc}",
        tool_call_id=tool_call_id,
        name=name[:200],
        status="error",
    )


def _refusal(
    auth: Authorization, tool_call_id: str, name: str, gate: Gate, hidden: Collection[str] = ()
) -> ToolMessage:
    """The model's view of a refused call (``_explained``)."""
    return ToolMessage(
        content=_explained(auth, hidden),
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        artifact=_stop_mark(auth, gate),
    )


def _explained(auth: Authorization, hidden: Collection[str] = ()) -> str:
    """``auth.explain()`` as the model is told it: each grant or rule constraint on an argument in
    ``hidden`` (those LangGraph injects, ``_injected_names``) with its operand replaced
    (``_hiding``), and without the list of every capability the grant holds (``without_held``:
    until review R60 the model was told it; the audit entry keeps it)."""
    told = replace(auth, reasons=tuple(without_held(reason) for reason in auth.reasons))
    return _hiding(told.explain(), hidden)


HIDDEN_OPERAND = "<not shown: an injected argument>"
"""What the model is shown for the operand of a grant's or a policy rule's constraint on an
argument it does not write (``_hiding``)."""

_JSON_TEXT = r'"(?:[^"\\]|\\.)*"'
_OPERANDS = (
    # A capability's clause (``tool:pay?amount<=500&api_key=...``, ``format_capability``): after
    # ``?`` or ``&``, its operand URL-quoted, so it ends at ``&``, ``;``, ``,``, ``)`` or a space
    # (until review R82 a capability in a list, ``a?k=v, b``, lost the comma that followed it).
    (r"(?<=[?&])", r"(?:<=|>=|\^=|=|<|>)", r"[^&;,)\s]*"),
    # A policy rule's words (``tool:pay where amount <= 500 and api_key = "..."``,
    # ``policy.describe``): after ``where`` or ``and``, its operand JSON (text, a list, a number).
    (
        r"(?:(?<= where )|(?<= and ))",
        r" (?:<=|>=|=|<|>|in|starts with) ",
        rf"(?:{_JSON_TEXT}|\[(?:{_JSON_TEXT}|[^\]\"])*\]|[^\s()]+)",
    ),
)


def _hiding(text: str, hidden: Collection[str], shown: str = HIDDEN_OPERAND) -> str:
    """``text`` with the operand of each constraint on an argument named in ``hidden`` replaced by
    ``HIDDEN_OPERAND``, where ``text`` quotes a granted capability or a policy rule (the forms
    ``_OPERANDS`` reads). An injected argument is filled by the framework and never shown to the
    model, and a grant or rule constraining it (``api_key: {eq: ...}``, an account's ``in`` list)
    holds what it may be filled with: until review R60 a refusal of the call, for that constraint
    or for a bound crossed on another argument, quoted it to the model. The model is told the
    argument's name and the kind of rule; the audit entry keeps the reason whole. ``shown``: what
    stands for each operand."""
    for name in hidden:
        for before, operator, operand in _OPERANDS:
            clause = re.compile(f"{before}({re.escape(name)}{operator}){operand}")
            text = clause.sub(lambda found: found.group(1) + shown, text)
    return text


_MACHINERY = (StoreError, AuditError)
"""The gate's errors whose text is about agentgate's own machinery, not the call: a store's path
and its SQL error, the audit log's state. The model is told their type only (``_failure``): until
review R60 a delegation that failed on the store told the supervisor's model the store's path."""


def _failure(
    tool_call_id: str,
    name: str,
    exc: BaseException,
    *,
    ends_run: bool = False,
    tools_own: bool = False,
    recorded: bool = True,
) -> ToolMessage:
    """The model's view of a call that failed. ``ends_run``: no later call can succeed (a
    delegation refused because the delegating grant is revoked or expired), so the run ends at
    the model's next turn (``_run_stop``). ``tools_own``: ``exc`` came out of the tool's own run
    (``_ToolRaised``), not from the gate. ``recorded``: the log holds the failure (a tool call's
    outcome, a refusal's entry); not so for a delegation whose sub-agent raised (a delegation has
    no outcome entry), which until review R81 was said to be recorded too."""
    # The exception's text can carry secrets from the tool's arguments or environment: the model
    # is told the kind of failure only; the audit outcome records the same. The text of an
    # agentgate error is the gate's (a deadline, a full queue, a refused delegation), unless the
    # tool raised it: its code chose that text (until review R60 it was quoted to the model), or
    # it is about the store or the log (``_MACHINERY``).
    gates_own = isinstance(exc, AgentGateError) and not tools_own
    detail = str(exc) if gates_own and not isinstance(exc, _MACHINERY) else type(exc).__name__
    if gates_own and isinstance(exc, AuthorityError) and isinstance(exc.finding, Finding):  # as ``explain``
        detail += f" [{exc.finding.kind}/{exc.finding.code}]"
    return ToolMessage(
        content=f"agentgate: tool {name} failed ({detail})"
        + ("; the failure is recorded." if recorded else "."),
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        artifact={STOP_KEY: True} if ends_run else None,
    )


class _ToolRaised:
    """The agentgate errors a call's tool raised out of its own run (``watch``, ``awatch``): its
    code's (an ``InputError`` of its own, a ``BackendFailed`` of a model it called), as against
    the gate's refusal of the call, which the model is told (``_failure``)."""

    __slots__ = ("_raised",)

    def __init__(self) -> None:
        self._raised: list[BaseException] = []

    def watch(self, run: Callable[[], R]) -> R:
        try:
            return run()
        except AgentGateError as exc:
            self._raised.append(exc)
            raise

    async def awatch(self, answer: Awaitable[R]) -> R:
        try:
            return await answer
        except AgentGateError as exc:
            self._raised.append(exc)
            raise

    def raised(self, exc: BaseException) -> bool:
        """Whether ``exc`` came out of the tool's own run."""
        return any(exc is own for own in self._raised)


def _asking(auth: Authorization, first: Authorization) -> dict[str, Any]:
    """The ``interrupt()`` payload of ``auth``, which waits for an approval, its request's reasons
    followed by why the approval presented did not count: the reasons ``auth`` has that ``first``
    (the call decided without an approval) has not (another call's, the requester's own, a key
    the gate does not list, a vote not counted). Until review R54 the request showed only the
    policy's reasons, so an approver asked again was not told why. How many of a quorum are
    given (``quorum_tally``) is left out: the payload shows it (``approved_by``, ``quorum``), and
    ``approval sign --store`` reads it from the store."""
    payload = auth.approval_payload()
    why = [reason for reason in auth.reasons if reason not in first.reasons and not TALLY.match(reason)]
    if why:
        request = payload["request"]
        payload = {**payload, "request": {**request, "reasons": [*request.get("reasons", ()), *why]}}
    return payload
