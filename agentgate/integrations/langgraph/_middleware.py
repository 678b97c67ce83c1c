"""``GateMiddleware``: every tool call and model call of one agent decided, asked for approval,
scheduled and audited through a ``Gate``; with what it decides (``_tool_call_of``, ``_model_args``,
``_model_name``), how a refusal or a failure is told to the model (``_refusal``, ``_failure``,
``_undecidable``) and how many answers of calls that must run once it keeps (``KEPT_RESULTS``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import orjson
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from agentgate._json import inexact_argument
from agentgate.capabilities import MAX_NAME_LENGTH, Call
from agentgate.dispatch.prefix import (
    CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    audio_tokens,
    media_part_tokens,
    split_media,
)
from agentgate.errors import (
    AgentGateError,
    AuthorityError,
    CapabilityError,
    Denied,
    Expired,
    InputError,
    Revoked,
)
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate, Verdict
from agentgate.gate._authorization import expect, shown
from agentgate.gate._checks import _TEXT_OR_NONE
from agentgate.integrations.langgraph._calls import (
    _WATCHED,
    ToolResult,
    _answer,
    _async_only,
    _Cut,
    _failed,
    _paused,
    _runs_in_a_thread,
    _Streamed,
    _ThreadedCall,
    _tokens_or_cut,
)
from agentgate.integrations.langgraph._delegation import _is_delegation
from agentgate.integrations.langgraph._models import DispatchedChatModel, ScriptedChatModel
from agentgate.integrations.langgraph._scope import (
    _CUT_CALL,
    _NO_CHECKPOINTER,
    _RUNNING_HERE,
    _SHARED_ID,
    _asked_in,
    _asking_answer,
    _calls_sharing,
    _cut_at_limit,
    _request_identity,
    _resumable,
    _run_id,
    _running_key,
    identity_from_context,
)
from agentgate.integrations.langgraph._stops import STOP_KEY, _disowned, _run_messages, _run_stop, _stop_mark
from agentgate.tasks import settled

R = TypeVar("R")
D = TypeVar("D")


KEPT_RESULTS = 256
"""How many answers of calls that must run once, and ran, a ``GateMiddleware`` keeps (the
newest), to answer them again when their tools node is run again (``_answer_again``)."""


def _tool_call_of(request: ToolCallRequest) -> Call:
    """The call decided: the tool that runs (``_running_tool``) and the arguments the model chose
    (``_model_args``)."""
    return Call.tool(_running_tool(request), _model_args(request))


def _running_tool(request: ToolCallRequest) -> str:
    """The name of the tool ``request`` runs: ``request.tool``'s own, else (no such tool) the
    name the model wrote. A middleware outside the gate may hand on another tool than the one
    the call names (``request.override(tool=...)``, LangChain's way to serve a tool at run
    time); until review R51 the call was decided, and recorded, under the name the model wrote,
    so a tool the policy refuses, or holds for an approval, ran under another tool's allow."""
    tool = request.tool
    return tool.name if tool is not None else request.tool_call["name"]


def _model_args(request: ToolCallRequest) -> Any:
    """The arguments of ``request``'s tool call less those LangGraph injects (``InjectedState``,
    ``InjectedStore``, ``InjectedToolCallId``, ``ToolRuntime``: in the tool's input schema, not
    in the schema the model is shown). ``ToolNode`` replaces whatever the model wrote for them
    with the injected value, so a value the model forged for one is never what runs: deciding
    and auditing it would let a model meet a constraint with a value the tool never sees (until
    review R42). A constraint on an injected argument is therefore never met (the argument is
    missing from the call decided): a policy constrains what the model chooses."""
    args = request.tool_call.get("args") or {}
    tool = request.tool
    if tool is None or not isinstance(args, Mapping) or not args:
        return args
    try:
        shown = tool.tool_call_schema  # memoized by LangChain
        if isinstance(shown, dict) or not hasattr(shown, "model_fields"):
            return args  # a JSON schema given as is: nothing is injected into it
        if shown.model_fields.keys() >= args.keys():
            return args  # the usual call: only what the model is shown (no input schema built)
        full = tool.get_input_schema()
    except Exception:  # a schema LangChain cannot build: ToolNode's own error, when it runs
        return args
    if not hasattr(full, "model_fields"):
        return args
    injected = full.model_fields.keys() - shown.model_fields.keys()
    if not injected.intersection(args):
        return args
    return {name: value for name, value in args.items() if name not in injected}


def _refused_call(request: ToolCallRequest) -> tuple[Call, tuple[str, ...]]:
    """The call to record the refusal of an undecidable tool call under (``_undecidable``), and
    the reasons to add: ``Call.tool`` of it when its name is a resource name; else ``tool:NAME``
    as asked (the Gate never decides it), cut to the longest resource name, with the full
    name's length and SHA-256 in a reason, so the entry fits the log."""
    with contextlib.suppress(InputError):
        return _tool_call_of(request), ()
    name = _running_tool(request)
    name = name if isinstance(name, str) else repr(name)
    raw = request.tool_call.get("args") or {}
    args = dict(raw) if isinstance(raw, Mapping) else {}
    resource = f"tool:{name}"
    if len(resource) <= MAX_NAME_LENGTH:
        return Call(resource, "invoke", args), ()
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return Call(resource[:MAX_NAME_LENGTH], "invoke", args), (
        f"the tool name has {len(name)} characters (sha256:{digest}); "
        f"the resource recorded is its first {MAX_NAME_LENGTH - len('tool:')}",
    )


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
        return [item.model_copy() if isinstance(item, ToolMessage) else item for item in kept]
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


_ASYNC_ONLY = (
    "tool {name} has only an async implementation (a coroutine), so it cannot run in a sync run "
    "(invoke, stream); nothing ran; run the agent with ainvoke or astream"
)
"""Why a call of an async-only tool in a sync run is refused before it is decided. Until review
R54 it was allowed and handed to LangChain, which raised ``NotImplementedError`` before any of
the tool's code ran: the call was recorded as started and failed and charged, and a tool that
must run once was refused as "already ran and failed" when its run was replayed under
``ainvoke``."""

_NO_CALL_ID = (
    "the tool call has no id; a call without one cannot be bound to one run or answered, so it is not run"
)
"""Why a tool call without an id (``None`` or ``""``: a model or backend that sent none) is
refused before it is decided. With ``None``, LangChain runs the tool and then fails to wrap its
result (``TypeError``): the call ran, yet it was recorded as a failure and not charged, and the
model, told it failed, asked again. With ``""``, a call of a tool that is not idempotent had no
once-only record (``Gate.authorize``), so a re-run of its task (a run resumed after a crash) ran
it again."""


def _unusable_answer(request: ToolCallRequest, call_id: str) -> InputError | None:
    """Why ``request``'s call is not run, if so: the answer that asked for it was cut at its
    output limit (``_CUT_CALL``), or gives this call's id to more than one call (``_SHARED_ID``)
    (none of its calls is run then), or the call's arguments as the model wrote them hold a number
    no float holds as written (``_inexact_arguments``)."""
    answer = _asking_answer(request)
    if cut := _cut_at_limit(answer):
        return InputError(_CUT_CALL.format(reason=cut))
    if (count := _calls_sharing(answer, call_id)) > 1:
        return InputError(_SHARED_ID.format(call_id=call_id[:MAX_NAME_LENGTH], count=count))
    return _inexact_arguments(request, answer, call_id)


def _inexact_arguments(request: ToolCallRequest, answer: AIMessage | None, call_id: str) -> InputError | None:
    """Why the call is refused when its arguments, as the model wrote them, hold a number that no
    float holds as written (``100.00000000000000001``): the chat model read it as the nearest
    float (``100.0``), and a bound ``amount<=100`` would be decided on another value than the
    one the model gave (until review R54). The text is the OpenAI form of the call that chat
    models keep beside the parsed calls (``additional_kwargs["tool_calls"]``: LangChain's OpenAI
    model, ``DispatchedChatModel``); a call whose arguments were changed since they were read
    from it (another middleware's edit) is decided as it is. As the command line refuses such
    ``--args`` (``_json.inexact_argument``)."""
    raw = answer.additional_kwargs.get("tool_calls") if answer is not None else None
    if not isinstance(raw, list):
        return None
    for written in raw:
        if not isinstance(written, Mapping) or written.get("id") != call_id:
            continue
        function = written.get("function")
        if not isinstance(function, Mapping):
            return None
        text = function.get("arguments")
        said = inexact_argument(text, request.tool_call.get("args")) if isinstance(text, str) else None
        return InputError(said) if said is not None else None
    return None


def _no_such_tool(name: object) -> InputError:
    """Why a call of a tool the agent does not have is refused (``GateMiddleware._unknown_tool``).
    Recorded as a ``deny``: a model asking for a tool that is not there is evidence a reviewer
    wants (until review R52 LangChain's ToolNode answered it and the log had nothing)."""
    shown_name = name[:MAX_NAME_LENGTH] if isinstance(name, str) else repr(name)[:MAX_NAME_LENGTH]
    return InputError(f"the agent has no tool named {shown_name!r}; nothing ran")


def _refusal(auth: Authorization, tool_call_id: str, name: str, gate: Gate) -> ToolMessage:
    return ToolMessage(
        content=auth.explain(),
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        artifact=_stop_mark(auth, gate),
    )


def _failure(tool_call_id: str, name: str, exc: BaseException, *, ends_run: bool = False) -> ToolMessage:
    """The model's view of a call that failed. ``ends_run``: no later call can succeed (a
    delegation refused because the delegating grant is revoked or expired), so the run ends at
    the model's next turn (``_run_stop``)."""
    # The exception's text can carry secrets from the tool's arguments or environment: the model
    # is told the kind of failure only; the audit outcome records the same.
    detail = str(exc) if isinstance(exc, AgentGateError) else type(exc).__name__
    if isinstance(exc, AuthorityError) and isinstance(exc.finding, Finding):  # as ``explain`` names it
        detail += f" [{exc.finding.kind}/{exc.finding.code}]"
    return ToolMessage(
        content=f"agentgate: tool {name} failed ({detail}); the failure is recorded.",
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        artifact={STOP_KEY: True} if ends_run else None,
    )


def _asking(auth: Authorization, first: Authorization) -> dict[str, Any]:
    """The ``interrupt()`` payload of ``auth``, which waits for an approval, its request's reasons
    followed by why the approval presented did not count: the reasons ``auth`` has that ``first``
    (the call decided without an approval) has not (another call's, the requester's own, a key
    the gate does not list, a vote not counted). Until review R54 the request showed only the
    policy's reasons, so an approver asked again was not told why."""
    payload = auth.approval_payload()
    why = [reason for reason in auth.reasons if reason not in first.reasons]
    if why:
        request = payload["request"]
        payload = {**payload, "request": {**request, "reasons": [*request.get("reasons", ()), *why]}}
    return payload


class GateMiddleware(AgentMiddleware[Any, Any, Any]):
    """Authorizes, schedules and audits every tool and model call of one agent through ``gate``.

    ``agent`` is the name this agent runs under (required, non-empty text: without it the gate could
    not tell the agent's own identity from one it inherited); a run whose context carries another
    agent's identity (a nested agent that inherited its parent's context) is refused. With
    ``agent_did`` the identity's key must be that key too. ``enforce=True`` raises ``Denied`` instead of
    telling the model. ``model`` names the model resource (``model:NAME``) when the chat model's
    own name is not the one the policy uses; with ``named`` it names that chat model only, and any
    other (one a fallback middleware swaps in) is decided under its own name. ``gate_models=False``
    leaves model calls ungated (for policies that govern tools only).

    Install it last in ``middleware=[...]`` (innermost, as ``create_gated_agent`` does): each call
    a middleware makes (a retry, a fallback model, edited arguments) then reaches the gate and is
    decided as it really runs. A middleware inside it would run under a decision made for another
    call.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        agent: str,
        agent_did: str | None = None,
        enforce: bool = False,
        model: str | None = None,
        max_tokens: int = 1024,
        gate_models: bool = True,
        named: BaseChatModel | None = None,
    ) -> None:
        super().__init__()
        expect(gate, Gate, "gate", "a Gate")
        if not isinstance(agent, str) or not agent:
            # ``None`` would switch off the inherited-identity check (``Gate.authorize`` compares
            # the identity's name with ``agent`` only when there is one).
            raise InputError(
                f"GateMiddleware: agent must be the agent's name, non-empty text, got {shown(agent) if agent != '' else 'empty text'}"
            )
        expect(agent_did, _TEXT_OR_NONE, "agent_did", "a did:key or None")
        expect(model, _TEXT_OR_NONE, "model", "a model name or None")
        if type(max_tokens) is not int or max_tokens <= 0:
            raise InputError(f"agentgate[{agent}]: max_tokens must be a whole number > 0, got {max_tokens!r}")
        if gate_models and model is not None:
            _check_model_name(agent, model, "the name given for the model")
        elif gate_models and isinstance(named, BaseChatModel):
            _check_model_name(agent, _model_name(named), "the chat model's own name")
        self.named = named
        self.gate_models = gate_models
        self.gate = gate
        self.agent = agent
        self.agent_did = agent_did
        self.enforce = enforce
        self.model = model
        self.max_tokens = max_tokens
        self._usage_copies: dict[int, tuple[weakref.ref[BaseChatModel], BaseChatModel]] = {}
        self._schema_sizes: dict[int, tuple[weakref.ref[BaseTool], int]] = {}
        self._results: collections.OrderedDict[str, ToolResult] = collections.OrderedDict()
        self._results_lock = threading.Lock()
        self._in_flight: dict[tuple[str | None, str | None, str], threading.Event] = {}

    @property
    def name(self) -> str:
        return f"agentgate[{self.agent}]"

    # --- tools ----------------------------------------------------------------------------

    def _keep(self, auth: Authorization, result: ToolResult) -> ToolResult:
        """Keep the answer of a call that must run once and ran to completion, by its call-once
        key, for ``_answer_again``: a ``ToolMessage``, or the ``Command`` a tool answered with (its
        state update; until review R42 it was lost when the node ran again), or the list of them a
        tool may answer with (until review R51 not kept); ``result`` as it is."""
        if auth.once_key is not None and _answers_a_call(result) and not _failed(result):
            with self._results_lock:
                self._results[auth.once_key] = result
                while len(self._results) > KEPT_RESULTS:
                    self._results.popitem(last=False)
        return result

    @contextlib.contextmanager
    def _running(self, request: ToolCallRequest) -> Iterator[None]:
        """Mark the call of ``request`` running in this process while the block runs (its
        decision, then the allowed call until its outcome is handed to the gate), for
        ``_ran_here`` to wait for. From the decision on: a call still being decided when another
        call of its node paused the run has its allow recorded (the call started) before it runs,
        and the run resumed meanwhile would decide it between the two (refused as started, its
        outcome not recorded)."""
        key, done = _running_key(request), threading.Event()
        with self._results_lock:
            self._in_flight[key] = done
        own = _RUNNING_HERE.set(_RUNNING_HERE.get() | {key})
        try:
            yield
        finally:
            _RUNNING_HERE.reset(own)
            with self._results_lock:
                if self._in_flight.get(key) is done:
                    del self._in_flight[key]
            done.set()

    def _ran_here(self, request: ToolCallRequest) -> threading.Event | None:
        """The end of the same call's attempt, when one runs in this process now: LangGraph's
        async tools node leaves a call running when another call of the node pauses the run (an
        approval), and the run resumed at once would decide the call while it runs (refused as
        started, its outcome not recorded yet). The caller waits for it, then decides."""
        key = _running_key(request)
        if key in _RUNNING_HERE.get():  # a run inside the call itself (its tool runs the agent again)
            return None
        with self._results_lock:
            return self._in_flight.get(key)

    def _answer_again(self, auth: Authorization, call_id: str, name: str) -> ToolMessage | Command[Any]:
        """The answer to a refused call: its kept answer when it is refused because it already
        ran to completion in this process (a hand-built graph's tools node run again whole on
        resume, after another of its calls paused for an approval: LangGraph re-runs the node, and
        the call that ran would lose its result), else the refusal. The refusal is recorded
        either way (the call does not run again)."""
        if auth.once_key is not None:
            with self._results_lock:
                kept = self._results.get(auth.once_key)
            if kept is not None:
                return _copied(kept)
        return _refusal(auth, call_id, name, self.gate)

    def _authorize_tool(self, request: ToolCallRequest) -> Authorization:
        identity = _request_identity(request)
        call = _tool_call_of(request)
        return self._authorize(
            identity,
            call,
            call_id=request.tool_call["id"],
            run_id=_run_id(request),
            asked_in=_asked_in(request),
        )

    def _authorize(self, identity: AgentIdentity | None, call: Call, **context: Any) -> Authorization:
        """``Gate.authorize`` of ``call`` as this agent (``context``: its other keyword arguments),
        and while it needs a human approval, again with each answer to ``interrupt()``: an
        approval that does not hold (wrong approver, the requester itself, another call's, already
        used) is asked for again, and an answer that is not an approval at all ("deny") refuses the
        call, recorded as a refusal that closes the request (``Gate.decline``). With ``enforce``, a
        refusal raises ``Denied``."""

        def decide(approval: Approval | None) -> Authorization:
            return self.gate.authorize(
                identity, call, agent=self.agent, agent_did=self.agent_did, approval=approval, **context
            )

        auth = first = decide(None)
        if auth.needs_approval and not _resumable():
            # interrupt() would end the run with the request open, and Command(resume=...) would
            # fail in LangGraph: an approval could never reach this call. Closed and refused now.
            auth = self._refuse_pending(auth, _NO_CHECKPOINTER)
        while auth.needs_approval:
            approval = Approval.parse(interrupt(_asking(auth, first)))
            if approval is None:
                auth = self._refuse_pending(auth, "the answer to the request was not an approval")
                break
            asked, auth = auth, decide(approval)
            if not auth.allowed and not auth.needs_approval:
                # Refused with an approval in hand (already used, denied elsewhere, a budget that
                # cannot pay): the request the call has open (the resumed node opened a new one
                # when the approval's own was closed) would stay pending, shown to approvers and
                # never answered in the log. It is closed; the model is told the refusal's reason.
                with contextlib.suppress(InputError):  # already closed (the approval's own, used)
                    self.gate.decline(asked, "the call was refused with the approval given")
        if not auth.allowed and self.enforce:
            raise Denied(self.gate.explain_redacted(auth), auth.decision)
        return auth

    def _refuse_pending(self, auth: Authorization, reason: str) -> Authorization:
        """The refusal of ``auth``, which waits for an approval, recorded with ``reason``
        (``Gate.decline``), or with why it cannot be when it was decided meanwhile."""
        try:
            return self.gate.decline(auth, reason)
        except InputError as exc:  # decided meanwhile (approved, used, denied elsewhere)
            return replace(auth, verdict=Verdict.DENY, reasons=(*auth.reasons, str(exc)))

    def _foreign(self, request: ToolCallRequest) -> Authorization | None:
        """The recorded refusal of a delegation asked on an identity that is not this agent's own
        (a nested agent running on its parent's context would hand on the parent's rights).
        Raises ``Denied`` instead with ``enforce``."""
        identity = _request_identity(request)
        # The delegation tool's name (``ask_NAME``) need not be a resource name: the delegation is
        # decided as ``agent:NAME`` (``Gate.delegate``); a sub-agent named "Researcher" is one.
        refused = self.gate.refuse_foreign(
            identity, _refused_call(request)[0], agent=self.agent, agent_did=self.agent_did
        )
        if refused is not None and self.enforce:
            raise Denied(self.gate.explain_redacted(refused), refused.decision)
        return refused

    def _delegation_failed(
        self, request: ToolCallRequest, call_id: str, name: str, exc: Exception
    ) -> ToolMessage:
        """The supervisor's view of a delegation that raised (``_failure``). With ``enforce``, a
        refusal (of the delegation itself, or the sub-agent's own ``Denied``) raises ``Denied``.
        The run ends at the model's next turn when no later call can succeed: the delegating
        grant is revoked or expired, or the policy no longer names the supervisor
        (``_disowned``)."""
        if self.enforce and isinstance(exc, Denied):
            raise exc
        if self.enforce and isinstance(exc, AuthorityError):
            raise Denied(str(exc)) from exc
        dead = isinstance(exc, Revoked | Expired) or (
            isinstance(exc, AuthorityError) and _disowned(self.gate, _request_identity(request))
        )
        return _failure(call_id, name, exc, ends_run=dead)

    def _record_undecidable(self, request: ToolCallRequest, exc: InputError) -> None:
        """Record the refusal of a tool call that is refused before the gate decides it
        (``_undecidable``): a ``deny`` entry by the run's identity (``unknown`` without one), on
        the call as asked (``_refused_call``), with ``exc`` as its reason. Every refusal is
        evidence (docs/audit-format.md). A refusal whose entry cannot be encoded (``InputError``)
        is not recorded, and still refused; a store that cannot write raises, as for any
        decision, and nothing runs."""
        identity = _request_identity(request)
        call, extra = _refused_call(request)
        call_id = request.tool_call.get("id")
        with contextlib.suppress(InputError):
            self.gate.record_refusal(
                identity,
                call,
                (str(exc), *extra),
                call_id=call_id if isinstance(call_id, str) and call_id else None,
            )

    def _refuse_undecidable(
        self, request: ToolCallRequest, call_id: str, name: str, exc: InputError
    ) -> ToolMessage:
        """``_undecidable``, recorded (``_record_undecidable``); with ``enforce``, ``Denied`` is
        raised instead."""
        self._record_undecidable(request, exc)
        return self._undecided(call_id, name, exc)

    async def _arefuse_undecidable(
        self, request: ToolCallRequest, call_id: str, name: str, exc: InputError
    ) -> ToolMessage:
        """The async twin of ``_refuse_undecidable``: the record is written on a worker thread."""
        await self.gate.to_thread(self._record_undecidable, request, exc)
        return self._undecided(call_id, name, exc)

    def _unknown_tool(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], R], name: str
    ) -> R:
        """The answer to a call of a tool the agent does not have (recorded first): ToolNode's
        own, which names the tools there are, and runs nothing; with ``enforce``, ``Denied``."""
        if self.enforce:
            raise Denied(f"agentgate refused the call: {_no_such_tool(name)}")
        return handler(request)

    def _undecided(self, call_id: str, name: str, exc: InputError) -> ToolMessage:
        if self.enforce:
            raise Denied(f"agentgate refused the call: {exc}") from exc
        return _undecidable(call_id, name, exc)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Decide, ask for approval where needed, run under the scheduler, audit the outcome."""
        call_id, name = request.tool_call["id"] or "", request.tool_call["name"]
        if not isinstance(call_id, str) or not call_id:
            return self._refuse_undecidable(request, "", name, InputError(_NO_CALL_ID))
        if request.tool is None:  # no such tool: ToolNode answers so and runs nothing
            self._record_undecidable(request, _no_such_tool(name))
            return self._unknown_tool(request, handler, name)
        if (unusable := _unusable_answer(request, call_id)) is not None:
            return self._refuse_undecidable(request, call_id, name, unusable)
        if _is_delegation(request, self.gate):
            refused = self._foreign(request)
            if refused is not None:
                return _refusal(refused, call_id, name, self.gate)
            try:
                return handler(request)
            except GraphBubbleUp:
                raise  # the sub-agent's interrupt (an approval) pauses the supervisor's run
            except Exception as exc:  # a failing sub-agent is a failing tool, not the end of the run
                return self._delegation_failed(request, call_id, name, exc)
        if _async_only(request.tool):
            return self._refuse_undecidable(request, call_id, name, InputError(_ASYNC_ONLY.format(name=name)))
        if (busy := self._ran_here(request)) is not None:
            busy.wait()
        with self._running(request):  # from its decision on: a run resumed meanwhile waits for it
            return self._decide_and_run(request, handler, call_id, name)

    def _decide_and_run(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
        call_id: str,
        name: str,
    ) -> ToolResult:
        try:
            auth = self._authorize_tool(request)
        except InputError as exc:
            return self._refuse_undecidable(request, call_id, name, exc)
        if not auth.allowed:
            return self._answer_again(auth, call_id, name)

        try:
            return self.gate.run(
                auth,
                lambda: self._keep(auth, handler(request)),
                call_id=call_id,
                run_id=_run_id(request),
                failed=_failed,
                paused=_paused,
            )
        except GraphBubbleUp:
            raise  # interrupt() or Command(graph=PARENT) from inside the tool: LangGraph's to handle
        except AgentGateError as exc:
            if self.enforce:
                raise
            return _failure(call_id, name, exc)
        except Exception as exc:
            return _failure(call_id, name, exc)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The async twin of ``wrap_tool_call``; limits hold because the scheduler's slots are async."""
        call_id, name = request.tool_call["id"] or "", request.tool_call["name"]
        if not isinstance(call_id, str) or not call_id:
            return await self._arefuse_undecidable(request, "", name, InputError(_NO_CALL_ID))
        if request.tool is None:  # no such tool: ToolNode answers so and runs nothing
            await self.gate.to_thread(self._record_undecidable, request, _no_such_tool(name))
            return await self._unknown_tool(request, handler, name)
        if (unusable := _unusable_answer(request, call_id)) is not None:
            return await self._arefuse_undecidable(request, call_id, name, unusable)
        if _is_delegation(request, self.gate):
            refused = await self.gate.to_thread(self._foreign, request)
            if refused is not None:
                return _refusal(refused, call_id, name, self.gate)
            try:
                return await handler(request)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                return self._delegation_failed(request, call_id, name, exc)
        if (busy := self._ran_here(request)) is not None:
            await self.gate.to_thread(busy.wait)
        with self._running(request):  # from its decision on: a run resumed meanwhile waits for it
            return await self._adecide_and_run(request, handler, call_id, name)

    async def _adecide_and_run(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
        call_id: str,
        name: str,
    ) -> ToolResult:
        try:
            auth = await self._decided(self._authorize_tool, request, lambda auth: auth)
        except InputError as exc:
            return await self._arefuse_undecidable(request, call_id, name, exc)
        if not auth.allowed:
            return self._answer_again(auth, call_id, name)

        # A sync tool runs in a worker thread under ainvoke, which no cancellation stops: not
        # preemptible, its attempt ends with its thread (its slot is not given back while it
        # runs, even when the run is cancelled), and past its timeout its result is returned
        # (not a timeout the model would retry), as under invoke.
        # A cancelled run waits for such an attempt and records the call as it ended
        # (``_ThreadedCall``); one cancelled before the tool's thread began it (the executor was
        # busy) is recorded as not started, and its tool does not begin after.
        threaded = _ThreadedCall(request, request.tool) if _runs_in_a_thread(request.tool) else None
        handled = request if threaded is None else threaded.request

        async def attempt() -> ToolResult:
            return self._keep(auth, await handler(handled))

        try:
            running = self.gate.arun(
                auth,
                functools.partial(threaded.attempt, attempt) if threaded else attempt,
                call_id=call_id,
                run_id=_run_id(request),
                failed=_failed,
                paused=_paused,
                preemptible=threaded is None,
                began=threaded.began if threaded is not None and threaded.marked else None,
            )
            return await (threaded.outcome(running) if threaded else running)
        except GraphBubbleUp:
            raise
        except AgentGateError as exc:
            if self.enforce:
                raise
            return _failure(call_id, name, exc)
        except Exception as exc:
            return _failure(call_id, name, exc)

    async def _decided(
        self, decide: Callable[[R], D], request: R, auth_of: Callable[[D], Authorization]
    ) -> D:
        """``decide(request)`` on a worker thread (store I/O stays off the event loop).

        A cancellation of the awaiting task cannot stop a decision under way: it is recorded,
        with what it reserved. So the decision is waited for, an allow is settled as a call that
        did not run (``Gate.abandon``: an ``error`` outcome, ``CancelledError: given up before
        the call started``, its reservation released, a once-only call left to run when its run
        is resumed), and the cancellation goes on, without waiting for a free slot of the tool.
        Raises what ``decide`` raises.
        """
        future = asyncio.ensure_future(self.gate.to_thread(decide, request))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await settled(future)
            if not future.cancelled() and future.exception() is None:
                auth = auth_of(future.result())
                if auth.allowed:
                    self.gate.abandon(auth)
            raise

    # --- models ---------------------------------------------------------------------------

    def _model_call(self, request: ModelRequest[Any]) -> Call:
        """The model call to decide: ``model:NAME`` with the output limit it will run with (the
        request's ``max_tokens``, else the chat model's own, else the middleware's)."""
        named = self.model is not None and (self.named is None or request.model is self.named)
        name = self.model if named else _model_name(request.model)
        configured = getattr(request.model, "max_tokens", None)
        own = configured if type(configured) is int and configured > 0 else None
        limit = request.model_settings.get("max_tokens") or own or self.max_tokens
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        if type(limit) is not int or limit <= 0:  # ``int()`` raised on inf and NaN, cut 0.5 to 0
            raise InputError(f"agentgate[{self.agent}]: max_tokens must be a whole number > 0, got {limit!r}")
        return Call.model(str(name), {"max_tokens": limit})

    def _authorize_model(self, request: ModelRequest[Any]) -> tuple[Authorization, ModelRequest[Any]]:
        identity = identity_from_context(request.runtime.context)
        call = self._model_call(request)
        # The system message is sent too, before the request's ``messages`` (which leave it out):
        # until review R51 it was not counted, so a long system prompt made a call whose input
        # the budget could not pay look affordable, and it ran and overran the budget.
        system = getattr(request, "system_message", None)
        sent = request.messages if system is None else [system, *request.messages]
        shown = sum(self._schema_chars(tool) for tool in request.tools)
        prompt = (sum(_sent_chars(m) for m in sent) + shown) // CHARS_PER_TOKEN + 1
        # A model call behind an approval gate (e.g. on ``max_tokens``) is asked for as a tool
        # call is: refused without asking, it could never run, since no resume could approve it.
        auth = self._authorize(identity, call, tokens=(prompt, call.args["max_tokens"]))
        if auth.allowed and request.model_settings.get("max_tokens") != call.args["max_tokens"]:
            # The call runs with the output limit it was decided (and its cost reserved) for:
            # passed to the model as ``max_tokens``, as create_agent binds ``model_settings``.
            request = request.override(
                model_settings={**request.model_settings, "max_tokens": call.args["max_tokens"]}
            )
        if (
            auth.allowed
            and self.gate.dispatches
            and not isinstance(request.model, ScriptedChatModel | DispatchedChatModel)
        ):
            # The dispatcher chooses the backend: the agent's own model is swapped for one that
            # sends the same request through it (OpenAI-compatible chat completions).
            model = DispatchedChatModel(
                gate=self.gate,
                model_name=call.resource.removeprefix("model:"),
                max_tokens=call.args["max_tokens"],
                tenant=self.gate.tenant_of(identity) if identity else "default",
            )
            request = request.override(model=model)
        elif auth.allowed and getattr(request.model, "stream_usage", True) is None:
            request = request.override(model=self._with_stream_usage(request.model))
        return auth, request

    def _schema_chars(self, tool: BaseTool | dict[str, Any]) -> int:
        """About how many characters of ``tool``'s schema a model call sends (its OpenAI-format
        JSON; until review R51 not counted: many tools, or long descriptions, reserved less than
        was billed). Measured once per tool object; a schema LangChain cannot build counts for
        nothing (the model call fails on it, not the gate)."""
        if isinstance(tool, dict):
            with contextlib.suppress(orjson.JSONEncodeError, TypeError):
                return len(orjson.dumps(tool, default=str))
            return 0
        found = self._schema_sizes.get(id(tool))
        if found is not None and found[0]() is tool:
            return found[1]
        size = 0
        with contextlib.suppress(Exception):
            size = len(orjson.dumps(convert_to_openai_tool(tool), default=str))
        if len(self._schema_sizes) >= 1024:  # tools made per run: forget them all, measure again
            self._schema_sizes.clear()
        self._schema_sizes[id(tool)] = (weakref.ref(tool), size)
        return size

    def _with_stream_usage(self, model: BaseChatModel) -> BaseChatModel:
        """``model`` (a ``ChatOpenAI``-like model whose ``stream_usage`` was left unset) asking for
        the usage event when it streams, as the gateway does: langchain-openai leaves it off for a
        ``base_url`` of its own (vLLM, SGLang), so a streamed call reported no usage and was charged
        its reservation. A copy, made once per model instance; an explicit ``stream_usage=False``
        (an endpoint that refuses ``stream_options``) is left as it is."""
        found = self._usage_copies.get(id(model))
        if found is not None and found[0]() is model:
            return found[1]
        copy = model.model_copy(update={"stream_usage": True})
        if len(self._usage_copies) >= 8:  # a fallback middleware's models: a few at most
            self._usage_copies.clear()
        self._usage_copies[id(model)] = (weakref.ref(model), copy)
        return copy

    def _stopped(self, auth: Authorization) -> ModelResponse[Any]:
        """The answer that ends the run on a refused model call."""
        return self._last_word(auth.explain(), _stop_mark(auth, self.gate))

    def _stop(self, refused: ToolMessage) -> ModelResponse[Any]:
        """The answer that ends the run on the refused tool call ``refused`` (``_run_stop``)."""
        return self._last_word(str(refused.content), refused.artifact)

    def _last_word(self, content: str, mark: object) -> ModelResponse[Any]:
        # An answer without tool calls is the agent's exit; its metadata carries the stop mark
        # (``_stop_mark``), which a delegation tool reads on a sub-agent's answer (``_ran_out``).
        metadata = dict(mark) if isinstance(mark, dict) else {}
        return ModelResponse(result=[AIMessage(content=content, name=self.agent, response_metadata=metadata)])

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        """Reserve the token budget, run the model, commit the tokens it reports using."""
        if (stop := _run_stop(_run_messages(request))) is not None:
            return self._stop(stop)
        if not self.gate_models:
            return handler(request)
        auth, request = self._authorize_model(request)
        if not auth.allowed:
            return self._stopped(auth)
        watch = _Streamed()
        watching = _WATCHED.set(watch)
        try:

            def call() -> ModelResponse[Any] | _Cut:
                try:
                    return handler(request)
                except GraphBubbleUp:
                    raise
                except Exception as exc:
                    if watch.delivered:
                        return _Cut(exc)
                    raise

            return _answer(self.gate.run(auth, call, spent=_tokens_or_cut))
        finally:
            _WATCHED.reset(watching)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """The async twin of ``wrap_model_call``."""
        if (stop := _run_stop(_run_messages(request))) is not None:
            return self._stop(stop)
        if not self.gate_models:
            return await handler(request)
        auth, request = await self._decided(self._authorize_model, request, lambda decided: decided[0])
        if not auth.allowed:
            return self._stopped(auth)
        watch = _Streamed()
        watching = _WATCHED.set(watch)
        try:

            async def call() -> ModelResponse[Any] | _Cut:
                try:
                    return await handler(request)
                except GraphBubbleUp:
                    raise
                except Exception as exc:
                    if watch.delivered:
                        return _Cut(exc)
                    raise

            return _answer(await self.gate.arun(auth, call, spent=_tokens_or_cut))
        finally:
            _WATCHED.reset(watching)


_IMAGE_PARTS = frozenset({"image_url", "image"})
"""The ``type`` of a content part that carries an image: OpenAI's ``image_url``, LangChain's and
Anthropic's ``image`` (by URL, base64 data or file id)."""


def _sent_chars(message: BaseMessage) -> int:
    """About how many characters of ``message`` a model call sends: its content, and the tool
    calls of an answer (their names and arguments go back to the model with it; until review R51
    they were not counted, so a conversation whose calls carried long arguments reserved less
    than it was billed). A media part counts as the dispatcher estimates it (``_media_tokens``),
    never by the length of its data (until review R52 a photo sent as base64 reserved hundreds of
    thousands of tokens, and a budget refused the call; until review R53 so did a recording or a
    file). Arguments that cannot be encoded (nested past 255 levels: such a call was refused)
    count for nothing."""
    content: object = message.content
    media = 0
    if isinstance(content, list):
        content, media = split_media(content, _media_tokens)
    size = len(str(content)) + media * CHARS_PER_TOKEN
    for call in getattr(message, "tool_calls", None) or ():
        with contextlib.suppress(orjson.JSONEncodeError, TypeError):
            size += len(str(call.get("name") or "")) + len(orjson.dumps(call.get("args"), default=str))
    return size


def _media_tokens(part: Mapping[str, object]) -> int | None:
    """The tokens of a content part that carries media, as ``dispatch.prefix`` estimates them for
    the gateway and the dispatcher (OpenAI's ``image_url``, ``input_audio`` and ``file`` parts),
    and for LangChain's own blocks: an ``image`` at ``IMAGE_TOKENS``, an ``audio`` block's base64
    (``base64``, or ``data`` in the older form) by its duration (``audio_tokens``). ``None`` for
    any other part (text, audio given by URL), which counts by its characters."""
    kind = part.get("type")
    if kind in _IMAGE_PARTS:
        return IMAGE_TOKENS
    if kind == "audio":
        data = part.get("base64", part.get("data"))
        return audio_tokens(data) if isinstance(data, str) else None
    return media_part_tokens(part)


def _check_model_name(agent: str, name: str, given_as: str) -> None:
    """Raise ``CapabilityError`` when ``name`` (``given_as``: where it came from) cannot name a
    model resource (``model:NAME``): the middleware is being made, and every model call would be
    refused with it. Until review R52 such a name failed at the agent's first model call."""
    try:
        Call.model(name)
    except CapabilityError as exc:
        raise CapabilityError(
            f"agentgate[{agent}]: the model name {name!r} ({given_as}) cannot name a model "
            f"resource (model:NAME): {exc}; pass the name the policy uses "
            "(create_gated_agent(model_name=...), GateMiddleware(model=...))"
        ) from exc


def _model_name(model: BaseChatModel) -> str:
    """The name a chat model was given: ``model_name`` (ChatOpenAI, ChatGroq), ``model``
    (ChatOllama, ChatAnthropic, ChatGoogleGenerativeAI), ``model_id`` (ChatBedrock,
    ChatHuggingFace), else its LangChain type."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type
