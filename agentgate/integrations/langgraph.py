"""LangGraph / LangChain integration: every tool call and model call of an agent goes through a ``Gate``.

The only module of agentgate that imports langgraph or langchain (the optional ``langgraph`` extra).

- ``GateMiddleware`` for ``langchain.agents.create_agent``: ``wrap_tool_call`` / ``awrap_tool_call``
  (decision, approval through ``interrupt()``, scheduler, audit) and ``wrap_model_call`` /
  ``awrap_model_call`` (model capability, approval through ``interrupt()`` where the policy's
  gate covers the model call, token budget reserved, backend chosen by the gate
  where a dispatcher is configured, actual usage from ``usage_metadata`` committed).
- ``gated_tool_node`` for hand-built ``StateGraph``s: a ``ToolNode`` whose sync and async paths
  both go through the gate, so the scheduler's limits hold under ``ainvoke`` too (LangGraph's
  own async ToolNode path gathers every call at once and ignores ``max_concurrency``).
- ``delegation_tool``: a sub-agent exposed as a tool; each call hands the sub-agent a fresh grant,
  attenuated to what the supervisor declares, bound to the sub-agent's own key, shorter-lived.
- ``ScriptedChatModel``: a deterministic chat model for offline examples, tests and benchmarks.

Identity travels in the run's context (``context=AgentIdentity(...)``, ``context_schema``), never in
state or messages, so the model never sees a key or a token. LangGraph hands a nested agent its
parent's context when it is invoked without one; the middleware of the nested agent sees an
identity that is not its own and refuses every call with an ``implicit_trust_inheritance`` finding.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import json
import re
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from datetime import timedelta
from typing import Annotated, Any, TypeVar

import orjson

try:  # the optional extra: say which, not only "No module named 'langchain'"
    from langchain.agents import create_agent
except ImportError as exc:  # pragma: no cover - exercised by tests/test_packaging_extras.py
    raise ImportError(
        f"agentgate.integrations.langgraph needs the langgraph extra ({exc}): "
        "pip install 'agentgate-middleware[langgraph]'",
        name=exc.name,
    ) from exc
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    InvalidToolCall,
    ToolCall,
    ToolMessage,
    UsageMetadata,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, Tool
from langchain_core.tracers.context import register_configure_hook
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.errors import GraphBubbleUp, GraphInterrupt, ParentCommand
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import get_runtime
from langgraph.types import Command, interrupt
from opentelemetry.trace import Span
from pydantic import Field

from agentgate.audit.spans import execute_tool_span, invoke_agent_span, record_decision
from agentgate.capabilities import MAX_NAME_LENGTH, Call, Capability
from agentgate.dispatch.backends import ChatChunk, Usage
from agentgate.errors import (
    AgentGateError,
    AuthorityError,
    BackendFailed,
    Denied,
    Expired,
    InputError,
    Revoked,
)
from agentgate.findings import Finding, FindingKind
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate, Verdict
from agentgate.gate._authorization import expect, shown
from agentgate.gate._checks import _TEXT_OR_NONE
from agentgate.gate._delegation import _delegation_terms
from agentgate.keys import SigningKey
from agentgate.tasks import settled

__all__ = [
    "DispatchedChatModel",
    "GateMiddleware",
    "ScriptedChatModel",
    "create_gated_agent",
    "delegation_tool",
    "gated_tool_node",
    "identity_from_context",
]

ToolResult = ToolMessage | Command[Any]
R = TypeVar("R")
D = TypeVar("D")
STOP_KEY = "agentgate_stop"
"""Set in the artifact of a refusal that no later call of this run can overcome (see ``_ends_run``)."""
_BUDGET_KEY = "agentgate_budget_exhausted"
"""Set with ``STOP_KEY`` when the refusal is for an exhausted budget, in the artifact of the refused
tool call and in the metadata of the answer that ends the run (``_stop_mark``): a delegation tool
reads it on its sub-agent's last answer (``_paid_for_nothing``)."""
_DEAD_IDENTITY = frozenset({"revoked", "grant_expired", "no_chain", "inherited_identity", "untrusted_root"})
"""Finding codes of a refusal that every later call on the same identity gets too: a revoked or
expired grant, a run without an identity, a nested agent on its parent's identity, a chain whose
root the policy no longer trusts (its trust anchor rotated out, e.g. while the run was paused)."""


def identity_from_context(context: object) -> AgentIdentity | None:
    """The ``AgentIdentity`` carried by a run context: the context itself, its ``agentgate``
    attribute, or its ``"agentgate"`` key. ``None`` when the run carries none."""
    if isinstance(context, AgentIdentity):
        return context
    found = context.get("agentgate") if isinstance(context, dict) else getattr(context, "agentgate", None)
    return found if isinstance(found, AgentIdentity) else None


def _run_id(request: ToolCallRequest) -> str | None:
    """The scope of the call's idempotency key: the LangGraph thread and the model answer that
    asked for the call (the id of the ``AIMessage`` in the state whose ``tool_calls`` hold it).
    A node retried, resumed after an interrupt, replayed from an older checkpoint or forked with
    ``update_state`` (time travel: LangGraph gives the fork's task a new ``checkpoint_ns``, the
    answer keeps its id) reuses a completed result instead of running again; the same tool call
    id in a later answer or another run (a model that numbers its calls from 0 in every answer)
    is another call, and runs. Without such a message in the state (a hand-built graph keeping
    its messages elsewhere), or without a thread, the task the call runs in: ``_task_scope``.
    The tasks above the call's own (a sub-agent's run inside a delegation) are part of it."""
    thread = _thread_scope(request)
    answer = _asking_answer(request)
    if thread is None or answer is None or not isinstance(answer.id, str) or not answer.id:
        # No thread, no time travel: and two runs without one may share an answer's id (a
        # LangChain cache hands the same answer, ids and all, to both).
        return _task_scope(getattr(request.runtime, "config", None))
    return f"{thread}|answer:{answer.id}"


def _thread_scope(request: ToolCallRequest) -> str | None:
    """``thread|outer tasks`` of the call's run config: the LangGraph thread and the tasks above
    the call's own (a sub-agent run inside a delegation's tool call: two delegations in one
    thread whose sub-agent answered the same, from a cache, are two scopes); ``None`` without a
    thread."""
    configurable = (getattr(request.runtime, "config", None) or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None:
        return None
    return f"{thread}|{str(configurable.get('checkpoint_ns') or '').rpartition('|')[0]}"


def _asking_answer(request: ToolCallRequest) -> AIMessage | None:
    """The newest ``AIMessage`` in the request's state that asked for this tool call."""
    state = request.state
    if isinstance(state, Mapping):
        messages = state.get("messages")
    else:
        messages = state if isinstance(state, list) else getattr(state, "messages", None)
    call_id = request.tool_call.get("id")
    if not isinstance(messages, list) or not call_id:
        return None
    for message in reversed(messages):
        if isinstance(message, AIMessage) and any(c.get("id") == call_id for c in message.tool_calls):
            return message
    return None


_NO_CHECKPOINTER = (
    "the agent runs without a checkpointer, so no approval could resume it; "
    "build it with one (checkpointer=InMemorySaver(), SqliteSaver, PostgresSaver)"
)


def _resumable() -> bool:
    """Whether the run in progress keeps checkpoints, so that a ``Command(resume=...)`` can
    answer an ``interrupt()`` of it (a sub-agent's run has its parent's checkpointer)."""
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:
        return True  # outside a run: interrupt() says so itself
    return bool(configurable.get(CONFIG_KEY_CHECKPOINTER))


def _asked_in(request: ToolCallRequest) -> tuple[str, str] | None:
    """Where the call's id names one call across edits of the answer that asked for it (the
    thread and the outer tasks), and the version of that answer (its id and a digest of its tool
    calls): what the Gate closes the approval requests of edited or replaced calls by
    (``Gate.authorize``'s ``asked_in``; an answer edited in place with ``update_state`` keeps its
    id, one appended in its place gets another). ``None`` without a thread or an asking answer."""
    scope, answer = _thread_scope(request), _asking_answer(request)
    if scope is None or answer is None:
        return None
    calls = [(c.get("id"), c.get("name"), c.get("args")) for c in answer.tool_calls]
    shown = json.dumps([answer.id, calls], sort_keys=True, default=repr, ensure_ascii=True)
    return scope, hashlib.sha256(shown.encode()).hexdigest()


_RUNNING_HERE: ContextVar[frozenset[tuple[str | None, str | None, str]]] = ContextVar(
    "agentgate_running_here", default=frozenset()
)
"""The calls (``_running_key``) whose run the current context is inside: never waited for."""


def _running_key(request: ToolCallRequest) -> tuple[str | None, str | None, str]:
    """The holder, run scope and id of a tool call: which call ``GateMiddleware._running`` marks."""
    identity = _request_identity(request)
    return (identity.did if identity else None, _run_id(request), str(request.tool_call.get("id")))


KEPT_RESULTS = 256
"""How many answers of calls that must run once, and ran, a ``GateMiddleware`` keeps (the
newest), to answer them again when their tools node is run again (``_answer_again``)."""

_CUT_AT_LIMIT = re.compile(r"(?:length|max_tokens)+")
"""Finish reasons of an answer stopped at its output limit: OpenAI's, vLLM's, Ollama's
``length``; Anthropic's, Bedrock's ``max_tokens``; Gemini's ``MAX_TOKENS`` (compared in lower
case)."""


def _cut_at_limit(answer: AIMessage | None) -> str | None:
    """The finish reason of an answer stopped at its output limit, else ``None``."""
    if answer is None:
        return None
    metadata = answer.response_metadata
    for field in ("finish_reason", "stop_reason", "done_reason", "stopReason"):
        reason = metadata.get(field)
        # Matched repeated too: LangChain concatenates the text of chunks' metadata it adds up, so a
        # stream that said it twice says ``lengthlength``.
        if isinstance(reason, str) and _CUT_AT_LIMIT.fullmatch(reason.lower()):
            return reason
    return None


_CUT_CALL = (
    "the model's answer was cut at its output limit ({reason}) while it wrote its tool calls: "
    "their arguments may be incomplete, so none of them is run; ask again with a larger output "
    "limit or fewer calls at once"
)
"""Why a tool call of an answer stopped at its output limit is refused before it is decided. A
streamed answer's tool call arguments are parsed by LangChain as *partial* JSON: ``{"amount": 50``
of what was to be 5000 becomes a call with ``amount`` 50."""


def _task_scope(config: Mapping[str, Any] | None) -> str | None:
    """``thread|checkpoint_ns`` of a run config: the same for a task retried or resumed, another
    for every other step or run. ``None`` when the config names neither."""
    configurable = (config or {}).get("configurable") or {}
    thread, task = configurable.get("thread_id"), configurable.get("checkpoint_ns")
    if thread is None and not task:
        return None
    return f"{'' if thread is None else thread}|{task or ''}"


def _request_identity(request: ToolCallRequest | ModelRequest[Any]) -> AgentIdentity | None:
    """The identity in the run context of ``request`` (``identity_from_context``)."""
    return identity_from_context(request.runtime.context if request.runtime else None)


def _tool_call_of(request: ToolCallRequest) -> Call:
    """The call decided: the tool and the arguments the model chose (``_model_args``)."""
    return Call.tool(request.tool_call["name"], _model_args(request))


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
    name = request.tool_call["name"]
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


_NO_CALL_ID = (
    "the tool call has no id; a call without one cannot be bound to one run or answered, so it is not run"
)
"""Why a tool call without an id (``None`` or ``""``: a model or backend that sent none) is
refused before it is decided. With ``None``, LangChain runs the tool and then fails to wrap its
result (``TypeError``): the call ran, yet it was recorded as a failure and not charged, and the
model, told it failed, asked again. With ``""``, a call of a tool that is not idempotent had no
once-only record (``Gate.authorize``), so a re-run of its task (a run resumed after a crash) ran
it again."""


def _refusal(auth: Authorization, tool_call_id: str, name: str, gate: Gate) -> ToolMessage:
    return ToolMessage(
        content=auth.explain(),
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        artifact=_stop_mark(auth, gate),
    )


def _ends_run(auth: Authorization, gate: Gate) -> bool:
    """Whether the refusal ``auth`` ends the run: an exhausted budget, or an identity on which
    every later call is refused too (``_DEAD_IDENTITY``, ``_disowned``)."""
    return (
        auth.budget_exhausted
        or any(f.code in _DEAD_IDENTITY for f in auth.findings)
        or (not auth.allowed and _disowned(gate, auth.identity))
    )


def _disowned(gate: Gate, identity: AgentIdentity | None) -> bool:
    """Whether ``gate``'s policy no longer accepts ``identity`` (``Gate.disowns``): every call of
    it is refused (``... is not a principal of this policy``)."""
    return identity is not None and gate.disowns(identity)


def _stop_mark(auth: Authorization, gate: Gate) -> dict[str, bool] | None:
    """What a refusal that ends the run (``_ends_run``) carries, in its tool message's artifact
    and its answer's metadata: ``STOP_KEY``, and ``_BUDGET_KEY`` for an exhausted budget."""
    return {STOP_KEY: True, _BUDGET_KEY: auth.budget_exhausted} if _ends_run(auth, gate) else None


def _run_stop(messages: Sequence[BaseMessage]) -> ToolMessage | None:
    """The refusal to end the run on, when a tool call since the model's last turn was refused
    for good (``_ends_run``): asking the model again would only spend more, on calls that can
    only be refused (also when model calls are not gated)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return None
        if (
            isinstance(message, ToolMessage)
            and isinstance(message.artifact, dict)
            and message.artifact.get(STOP_KEY)
        ):
            return message
    return None


def _run_messages(request: ModelRequest[Any]) -> Sequence[BaseMessage]:
    """The run's own messages (its state), where a refusal's stop mark is kept: a middleware
    outside the gate may edit the request's copy (``ContextEditingMiddleware`` clears old tool
    results, their artifacts included); the request's messages when the state has none."""
    state = request.state
    messages = state.get("messages") if isinstance(state, Mapping) else None
    return messages if isinstance(messages, list) else request.messages


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
        self.named = named
        self.gate_models = gate_models
        self.gate = gate
        self.agent = agent
        self.agent_did = agent_did
        self.enforce = enforce
        self.model = model
        self.max_tokens = max_tokens
        self._usage_copies: dict[int, tuple[weakref.ref[BaseChatModel], BaseChatModel]] = {}
        self._results: collections.OrderedDict[str, ToolMessage | Command[Any]] = collections.OrderedDict()
        self._results_lock = threading.Lock()
        self._in_flight: dict[tuple[str | None, str | None, str], threading.Event] = {}

    @property
    def name(self) -> str:
        return f"agentgate[{self.agent}]"

    # --- tools ----------------------------------------------------------------------------

    def _keep(self, auth: Authorization, result: ToolResult) -> ToolResult:
        """Keep the answer of a call that must run once and ran to completion, by its call-once
        key, for ``_answer_again``: a ``ToolMessage``, or the ``Command`` a tool answered with (its
        state update; until review R42 it was lost when the node ran again); ``result`` as it is."""
        if auth.once_key is not None and isinstance(result, ToolMessage | Command) and not _failed(result):
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
            if isinstance(kept, ToolMessage):
                return kept.model_copy()
            if kept is not None:
                return kept  # a Command is immutable: LangGraph applies its update again, as it was
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

        auth = decide(None)
        if auth.needs_approval and not _resumable():
            # interrupt() would end the run with the request open, and Command(resume=...) would
            # fail in LangGraph: an approval could never reach this call. Closed and refused now.
            auth = self._refuse_pending(auth, _NO_CHECKPOINTER)
        while auth.needs_approval:
            approval = Approval.parse(interrupt(auth.approval_payload()))
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
            return handler(request)
        if cut := _cut_at_limit(_asking_answer(request)):
            return self._refuse_undecidable(request, call_id, name, InputError(_CUT_CALL.format(reason=cut)))
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
            return await handler(request)
        if cut := _cut_at_limit(_asking_answer(request)):
            incomplete = InputError(_CUT_CALL.format(reason=cut))
            return await self._arefuse_undecidable(request, call_id, name, incomplete)
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
        prompt = sum(len(str(m.content)) for m in request.messages) // 4 + 1
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


def _model_name(model: BaseChatModel) -> str:
    """The name a chat model was given: ``model_name`` (ChatOpenAI, ChatGroq), ``model``
    (ChatOllama, ChatAnthropic, ChatGoogleGenerativeAI), ``model_id`` (ChatBedrock,
    ChatHuggingFace), else its LangChain type."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type


_DELEGATION_TOOLS: dict[int, tuple[weakref.ref[BaseTool], weakref.ref[Gate]]] = {}
"""The tools ``delegation_tool`` made, by ``id``, each with the Gate that made it, both held
weakly (an entry goes with its tool): a delegation is known by the tool object itself, not by its
metadata, which whoever writes or converts a tool can set."""


def _register_delegation(tool: BaseTool, gate: Gate) -> None:
    key = id(tool)

    def forget(ref: weakref.ref[BaseTool]) -> None:
        entry = _DELEGATION_TOOLS.get(key)
        if entry is not None and entry[0] is ref:
            del _DELEGATION_TOOLS[key]

    _DELEGATION_TOOLS[key] = (weakref.ref(tool, forget), weakref.ref(gate))


def _is_delegation(request: ToolCallRequest, gate: Gate) -> bool:
    """Whether the requested tool is a delegation tool that ``gate`` made (``delegation_tool``).

    A delegation is authorized by the policy's delegation rule and the parent's grant
    (Gate.delegate), and audited there; the sub-agent's own calls go through its own middleware.
    One made by another Gate is an ordinary tool to this one, decided (and audited) by its
    policy: handed to an agent gated by another Gate, it would otherwise delegate under the
    maker's rules while the agent's own Gate was never asked and recorded nothing."""
    tool = request.tool
    entry = _DELEGATION_TOOLS.get(id(tool)) if tool is not None else None
    return entry is not None and entry[0]() is tool and entry[1]() is gate


def _runs_in_a_thread(tool: BaseTool) -> bool:
    """Whether LangChain runs ``tool`` in a worker thread when it is awaited: a sync function
    with no coroutine of its own."""
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


def _marked_in_its_thread(tool: BaseTool, begin: Callable[[], None]) -> BaseTool | None:
    """A shallow copy of ``tool`` (a sync tool ``_runs_in_a_thread``) whose work calls ``begin()``
    in its worker thread before it begins (``tool._run``, bound to ``tool`` itself: what the work
    changes on its tool changes ``tool``); ``None`` for a tool that does not reach ``_run`` by
    LangChain's own path from ``ainvoke`` (a subclass that overrides it may begin its work some
    other way, which ``begin`` would not see)."""
    kind = type(tool)
    if isinstance(tool, StructuredTool | Tool):  # ``ainvoke`` runs ``invoke`` in the executor
        own = kind.ainvoke in (StructuredTool.ainvoke, Tool.ainvoke) and kind.invoke is BaseTool.invoke
    else:  # ``arun`` awaits ``_arun``, which runs ``_run`` in the executor
        own = kind.ainvoke is BaseTool.ainvoke and kind.arun is BaseTool.arun
    if not own or kind.run is not BaseTool.run:
        return None
    work = tool._run

    @functools.wraps(work)
    def marked(*args: Any, **kwargs: Any) -> Any:
        begin()
        return work(*args, **kwargs)

    try:
        copy = tool.model_copy()
        object.__setattr__(copy, "_run", marked)  # the copy's own, found before its class's
    except Exception:  # a tool that cannot be copied: its attempt marks its start
        return None
    return copy


class _ThreadedCall:
    """One call of a sync tool under ``ainvoke``, whose attempts run in worker threads that no
    cancellation stops: whether an attempt runs now, and whether the tool's work began in its
    thread (``request``'s tool marks it, ``_marked_in_its_thread``): an attempt may wait for a
    free thread of a busy executor, and a call cancelled then never ran (``began``)."""

    def __init__(self, request: ToolCallRequest, tool: BaseTool) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._began = False
        self._given_up = False
        marked = _marked_in_its_thread(tool, self._begin)
        self.marked = marked is not None
        """Whether ``request``'s tool (``tool``) marks the start of its work (else ``began`` says
        nothing)."""
        self.request = request if marked is None else request.override(tool=marked)
        """The request to run: its tool marks the start of its work."""

    def _begin(self) -> None:
        """In the tool's worker thread, before its work: note it began, unless the call was given
        up (``began``), in which case the work does not begin."""
        with self._lock:
            if self._given_up:
                raise asyncio.CancelledError("the call was given up before its tool began")
            self._began = True

    def began(self) -> bool:
        """Whether the tool's work began in any attempt; from now on it does not begin (for
        ``Gate.arun``, once the call is cancelled and its attempt ended). Under one lock with
        ``_begin``: a thread that was about to begin the work either did (and this says so) or
        will not."""
        with self._lock:
            self._given_up = True
            return self._began

    async def attempt(self, run: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        """One attempt: ``run()`` awaited, its start and end noted."""
        self._idle.clear()
        try:
            return await run()
        finally:
            self._idle.set()

    async def outcome(self, running: Awaitable[ToolResult]) -> ToolResult:
        """Await ``running`` (``Gate.arun`` over ``attempt``). Cancelled while an attempt runs,
        the attempt runs to its end (its effect happens anyway), then ``running`` is cancelled:
        ``Gate.arun`` records and charges an attempt that returned as it ended, and starts no
        further attempt after one that failed or while none runs (waiting for a slot, before a
        retry). Then the cancellation goes on. (LangGraph does not cancel the tool's own task
        while the attempt's thread runs, so ``running`` is shielded and cancelled here.)"""
        future = asyncio.ensure_future(running)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not self._idle.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await self._idle.wait()
            future.cancel()
            await settled(future)
            raise


def _failed(result: object) -> bool:
    """Whether a tool's result reports a failure: a ``ToolMessage`` with ``status="error"``, also
    inside the ``Command`` a tool may return (its ``update``'s ``messages``)."""
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = result.update.get("messages")
        found = messages if isinstance(messages, list | tuple) else [messages]
        return any(isinstance(m, ToolMessage) and m.status == "error" for m in found)
    return isinstance(result, ToolMessage) and result.status == "error"


def _paused(exc: BaseException) -> bool:
    """A tool that called ``interrupt()``: it has not failed, it waits for its resume."""
    return isinstance(exc, GraphInterrupt)


class _Streamed(BaseCallbackHandler):
    """Watches one model call (``_WATCHED``) for output streamed out of it: a chunk with content,
    tool call fragments or other output (reasoning), as LangChain hands it to its callbacks, and
    so to a consumer streaming with ``stream_mode="messages"`` or ``astream_events``. A usage-only
    chunk is no output. Handed to LangChain's callback managers by a configure hook, so only
    while a model call is watched; called inline (no executor hop under ``ainvoke``) and for the
    model's LLM events only."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_retry = True
    ignore_chat_model = True
    ignore_custom_event = True

    def __init__(self) -> None:
        self.delivered = False

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        if self.delivered:
            return
        message = getattr(chunk, "message", None)
        self.delivered = bool(token) or (
            message is not None
            and bool(
                message.content or getattr(message, "tool_call_chunks", None) or message.additional_kwargs
            )
        )

    def on_stream_event(self, event: Any, **kwargs: Any) -> None:
        # LangChain's content-block streaming (LangGraph's ``stream_events(version="v3")``), which
        # fires no ``on_llm_new_token``: a delta, or a block that starts with something in it (a
        # text block starts empty).
        if self.delivered or not isinstance(event, Mapping):
            return
        kind = event.get("event")
        if kind == "content-block-delta":
            self.delivered = True
        elif kind == "content-block-start":
            block = event.get("content")
            self.delivered = isinstance(block, Mapping) and any(
                value for key, value in block.items() if key not in ("type", "index")
            )


_WATCHED: ContextVar[_Streamed | None] = ContextVar("agentgate_streamed", default=None)
"""The watch of the model call running in this context, if any (``GateMiddleware.wrap_model_call``)."""
register_configure_hook(_WATCHED, inheritable=True)


class _Cut:
    """What the function a model call runs under the Gate returns when the model failed after it
    had streamed output (``_Streamed``): the Gate's ``spent`` reads it (``_tokens_or_cut``) and
    raises ``exc`` there, so the call is recorded as an error charged as reserved (the backend
    generated, and billed, output before the stream was cut; how much cannot be known), as the
    gateway charges a stream cut after output was delivered, and ``exc`` goes on to the caller."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def _tokens_or_cut(response: object) -> tuple[int, int] | None:
    """``_tokens_used``, or raise the failure of a stream cut after output (``_Cut``)."""
    if isinstance(response, _Cut):
        raise response.exc
    return _tokens_used(response)


def _answer(response: ModelResponse[Any] | _Cut) -> ModelResponse[Any]:
    # ``Gate.run`` never returns a ``_Cut``: its ``spent`` raised the failure it carried.
    if isinstance(response, _Cut):  # pragma: no cover
        raise response.exc
    return response


def _tokens_used(response: object) -> tuple[int, int] | None:
    """(input, output) tokens the response reports in ``usage_metadata``; ``None`` when it reports
    none, or counts that are not non-negative integers (the call is then charged what it reserved)."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    usages = [u for m in messages if (u := getattr(m, "usage_metadata", None))]
    counts = [(u.get("input_tokens", 0), u.get("output_tokens", 0)) for u in usages if isinstance(u, Mapping)]
    if not counts or len(counts) != len(usages):
        return None
    if not all(type(n) is int and n >= 0 for pair in counts for n in pair):
        return None
    return sum(i for i, _ in counts), sum(o for _, o in counts)


def create_gated_agent(
    gate: Gate,
    *,
    name: str,
    model: BaseChatModel,
    tools: Sequence[BaseTool | Callable[..., Any]] = (),
    system_prompt: str | None = None,
    agent_did: str | None = None,
    enforce: bool = False,
    model_name: str | None = None,
    gate_models: bool = True,
    max_tokens: int = 1024,
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    checkpointer: Any = None,
) -> Any:
    """``create_agent`` with the gate's middleware installed last (innermost, after ``middleware``)
    and ``AgentIdentity`` as the context schema. Run it with ``context=identity``.

    Every call the other middleware makes goes through the gate: a retried tool is decided again
    (and a tool error, which the gate turns into a message, is not retried by them), a fallback
    model is decided under its own name (``model_name`` names ``model`` only), edited arguments
    are decided as edited.
    """
    return create_agent(
        model,
        list(tools),
        system_prompt=system_prompt,
        middleware=[
            *middleware,
            GateMiddleware(
                gate,
                agent=name,
                agent_did=agent_did,
                enforce=enforce,
                model=model_name,
                gate_models=gate_models,
                max_tokens=max_tokens,
                named=model,
            ),
        ],
        context_schema=AgentIdentity,
        checkpointer=checkpointer,
        name=name,
    )


def gated_tool_node(
    gate: Gate,
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    agent: str,
    agent_did: str | None = None,
    enforce: bool = False,
    name: str = "tools",
) -> ToolNode:
    """A ``ToolNode`` for hand-built graphs whose every call, sync or async, goes through ``gate``.

    A tool that calls ``interrupt()`` itself must not share a task with a call that may wait for
    an approval: LangGraph matches a task's resume values to its interrupts by position, and the
    node's calls run at once, so the answers would cross. Route such calls one per task (``Send``
    to this node with a one-call message list), as ``create_agent`` does (docs/langgraph.md)."""
    middleware = GateMiddleware(gate, agent=agent, agent_did=agent_did, enforce=enforce)
    return ToolNode(
        list(tools),
        name=name,
        wrap_tool_call=middleware.wrap_tool_call,
        awrap_tool_call=middleware.awrap_tool_call,
    )


def delegation_tool(
    gate: Gate,
    *,
    name: str,
    agent: Any,
    key: SigningKey,
    capabilities: Iterable[Capability | str],
    ttl: timedelta,
    budget: int | None = None,
    description: str | None = None,
) -> BaseTool:
    """Expose ``agent`` (a compiled graph gated under ``name``) to a supervisor as the tool ``ask_NAME``.

    The tool call itself is authorized as a delegation (``Gate.delegate``: the policy's delegation
    rule for the supervisor's roles, then attenuation of its grant), not as a tool rule. Each call delegates from the supervisor's grant a fresh one to ``key`` (the sub-agent's own
    key), attenuated to ``capabilities`` and ``budget``, living ``ttl`` at most and never past the
    parent's expiry, and runs the sub-agent with it. A delegation the parent cannot make (scope
    creep, an expired or revoked parent) is refused as a tool error; the sub-agent does not run.
    A sub-agent refused for budget before its grant paid for anything ends the supervisor's run
    too (``_paid_for_nothing``).

    The terms are checked when the tool is made, not at its first call: ``InputError`` for a
    ``gate`` that is not a ``Gate``, a ``name`` that is not non-empty text, a ``key`` that is not
    a ``SigningKey``, a ``ttl`` that is not a positive ``timedelta``, a ``budget`` that is not a
    non-negative whole number or ``None``; ``CapabilityError`` for ``capabilities`` that are not
    a list (one string included) or hold one that does not parse.
    """
    expect(gate, Gate, "gate", "a Gate")
    expect(description, (str, type(None)), "description", "text or None")
    caps = tuple(_delegation_terms(name, key, capabilities, ttl, budget))

    # One grant per delegating tool call, in its task (thread and graph step): when LangGraph
    # re-runs the tool to resume an interrupt (a sub-agent waiting for an approval), the
    # sub-agent resumes on the grant it had, so an approval bound to that grant still matches,
    # also when another process (a restart, another worker on the shared store) resumes it: the
    # Gate finds the grant in the store by the call it was delegated for (``Gate.delegate``'s
    # ``call``). The same tool call id in another turn or run (a model that numbers its calls
    # from 0) is another call and gets a fresh grant.
    def _delegate(where: _ToolCallPlace) -> AgentIdentity:
        context, config, tool_call_id = where
        scope = _task_scope(config)
        call = f"{scope}|{tool_call_id}" if tool_call_id and scope is not None else None
        return gate.delegate(
            identity_from_context(context),
            name=name,
            key=key,
            capabilities=caps,
            ttl=ttl,
            budget=budget,
            call=call,
        )

    # Spans: the delegation is an ``execute_tool ask_NAME`` span holding an ``invoke_agent NAME``
    # span, under which the sub-agent's own calls nest (a trace shows who asked whom).
    # The run context and config are read where LangGraph keeps them for the running task
    # (``_tool_call_place``), not injected as a ``ToolRuntime`` argument: LangChain validates and
    # then serializes an injected runtime, the graph state and every message in it included, on
    # each call (about 3 ms a delegation with benchmarks/langgraph_overhead.py's agents, measured
    # by the scratch runs of docs/langgraph.md's twelfth pass; more as the conversation grows).
    # Only the tool call id is injected.
    def run(
        task: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> tuple[str, dict[str, bool] | None]:
        with execute_tool_span(f"ask_{name}", call_id=tool_call_id, tracer=gate.tracer) as span:
            child = _delegated(span, _delegate, _tool_call_place(tool_call_id))
            with (
                invoke_agent_span(name, agent_id=child.did, tracer=gate.tracer),
                _no_parent_command(gate, child, name),
            ):
                last = _last_answer(agent.invoke({"messages": [HumanMessage(content=task)]}, context=child))
            return _reply(last, _ran_out(last) and _paid_for_nothing(gate, child))

    async def arun(
        task: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> tuple[str, dict[str, bool] | None]:
        with execute_tool_span(f"ask_{name}", call_id=tool_call_id, tracer=gate.tracer) as span:
            child = await gate.to_thread(_delegated, span, _delegate, _tool_call_place(tool_call_id))
            with (
                invoke_agent_span(name, agent_id=child.did, tracer=gate.tracer),
                _no_parent_command(gate, child, name),
            ):
                result = await agent.ainvoke({"messages": [HumanMessage(content=task)]}, context=child)
            last = _last_answer(result)
            return _reply(last, _ran_out(last) and await gate.to_thread(_paid_for_nothing, gate, child))

    tool = StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=f"ask_{name}",
        description=description or f"Hand a task to the {name} agent and get its answer.",
        # The artifact carries the mark that ends the supervisor's run (``_run_stop``), if any.
        response_format="content_and_artifact",
    )
    _register_delegation(tool, gate)
    return tool


_STEERS_PARENT = Finding(
    kind=FindingKind.IMPLICIT_TRUST_INHERITANCE,
    code="sub_agent_steers_parent",
    message=(
        "a sub-agent's tool returned Command(graph=Command.PARENT): it would write into the "
        "supervisor's state and run calls on the supervisor's grant; refused"
    ),
    hint="a sub-agent answers its task; only the supervisor's own model asks for its calls",
)


@contextlib.contextmanager
def _no_parent_command(gate: Gate, child: AgentIdentity, name: str) -> Iterator[None]:
    """Refuse a ``Command(graph=Command.PARENT)`` raised out of a delegated sub-agent's run
    (review R42): LangGraph applies it to the supervisor's graph, so the sub-agent could add an
    ``AIMessage`` with tool calls of its own choosing and have them run on the supervisor's grant,
    recorded as the supervisor's calls, with the authority it was never delegated. The attempt is
    recorded as a ``deny`` by the sub-agent (``implicit_trust_inheritance``) and the delegation
    fails with ``Denied`` (the supervisor's model is told; the supervisor's state is untouched).
    An ``interrupt()`` (an approval the sub-agent waits for) still pauses the run."""
    try:
        yield
    except ParentCommand:
        call = Call.tool(f"ask_{name}", {})
        refused = gate.record_refusal(child, call, (_STEERS_PARENT.message,), findings=(_STEERS_PARENT,))
        raise Denied(
            f"agentgate refused the delegation: {_STEERS_PARENT.message}", refused.decision
        ) from None


def _last_answer(result: Mapping[str, Any]) -> BaseMessage | None:
    """The last message of a sub-agent's run: its answer."""
    messages: Sequence[BaseMessage] = result.get("messages") or ()
    return messages[-1] if messages else None


def _ran_out(last: BaseMessage | None) -> bool:
    """Whether a sub-agent's run ended, with the answer ``last``, on an exhausted budget."""
    return isinstance(last, AIMessage) and bool(last.response_metadata.get(_BUDGET_KEY))


def _paid_for_nothing(gate: Gate, child: AgentIdentity) -> bool:
    """Whether the delegated grant ``child`` paid for no call (a ledger read). A sub-agent that ran
    out of budget before paying for anything ends the supervisor's run too (``_reply``): every
    later delegation of the same tool hands on a fresh grant just like it (the budget that could
    not pay is one above it, or one call costs more than the grant carries), and would only be
    refused again. One that spent part of its grant first is answered as usual: a budget of its
    own may be what ran out, and the next delegation, given a fresh one, is refused its first call
    if the supervisor's ran out."""
    spent = gate.remaining(child).get(child.grant_id)
    return spent is not None and spent[0] == 0


def _reply(last: BaseMessage | None, ends_run: bool) -> tuple[str, dict[str, bool] | None]:
    """The delegation tool's result: the sub-agent's answer, and as its artifact the mark that
    ends the supervisor's run at its model's next turn (``_run_stop``) when ``ends_run``."""
    answer = "" if last is None else str(last.content)
    return answer, {STOP_KEY: True, _BUDGET_KEY: True} if ends_run else None


_ToolCallPlace = tuple[object, Mapping[str, Any] | None, str | None]
"""Where a tool call runs: its run's context, the config of its task, its tool call id."""


def _tool_call_place(tool_call_id: str | None) -> _ToolCallPlace:
    """The running tool call's place in its graph: ``(None, None, tool_call_id)`` outside one
    (no context: a delegation from nobody, refused)."""
    try:
        config = get_config()
    except RuntimeError:  # not inside a runnable
        return None, None, tool_call_id
    runtime = get_runtime() if config.get("configurable") else None  # None: a runnable, no graph
    return getattr(runtime, "context", None), config, tool_call_id


def _delegated(
    span: Span, delegate: Callable[[_ToolCallPlace], AgentIdentity], where: _ToolCallPlace
) -> AgentIdentity:
    """``delegate(where)``, its decision on the delegation's span: the grant made, or the
    refusal, each with the index of the audit entry that recorded it."""
    try:
        child = delegate(where)
    except AuthorityError as exc:
        if span.is_recording():
            record_decision(span, "deny", audit_index=exc.audit_index, reason=str(exc)[:200])
        raise
    if span.is_recording():
        record_decision(
            span,
            "allow",
            capability_id=child.grant_id,
            chain_depth=len(child.chain.links),
            audit_index=child.audit_index,
        )
    return child


class DispatchedChatModel(BaseChatModel):
    """A chat model served through the gate's dispatcher: the router picks the backend (an
    OpenAI-compatible server: vLLM, SGLang, TGI, llama.cpp) for each call. Tools bound to it are
    sent in OpenAI's format and tool calls in the answer are parsed back."""

    gate: Any
    model_name: str
    max_tokens: int = 1024
    tenant: str = "default"
    tools: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "agentgate-dispatched"

    def bind_tools(self, tools: Any, **kwargs: Any) -> DispatchedChatModel:  # type: ignore[override]
        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _payload(self, messages: list[BaseMessage]) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_name,
            "messages": convert_to_openai_messages(messages),
            "max_tokens": self.max_tokens,
        }
        if self.tools:
            payload["tools"] = self.tools
        return payload

    @staticmethod
    def _result(served: Any) -> ChatResult:
        """The backend's answer as an ``AIMessage``: its tool calls in ``tool_calls``, the malformed
        ones in ``invalid_tool_calls`` (see ``_tool_call``), as LangChain's own OpenAI model does.

        Raises ``BackendFailed`` when ``tool_calls`` is there but not a list.
        """
        message_body = served.body["choices"][0]["message"]  # an object: BackendClient.chat checked
        raw_calls = message_body.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise BackendFailed(f"{served.backend}: tool_calls is not a list: {raw_calls!r:.80}")
        calls, invalid = DispatchedChatModel._tool_calls(raw_calls)
        usage = served.usage
        message = AIMessage(
            content=served.content,
            tool_calls=calls,
            invalid_tool_calls=invalid,
            usage_metadata=_usage_metadata(usage),
            response_metadata={"backend": served.backend, "finish_reason": served.finish_reason},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    @classmethod
    def _tool_calls(cls, raws: Iterable[object]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
        """The backend's tool calls parsed (``_tool_call``): the valid ones, and the others."""
        calls: list[ToolCall] = []
        invalid: list[InvalidToolCall] = []
        for raw in raws:
            parsed = cls._tool_call(raw)
            if parsed["type"] == "tool_call":
                calls.append(parsed)
            else:
                invalid.append(parsed)
        return calls, invalid

    @classmethod
    def _tool_call(cls, raw: object) -> ToolCall | InvalidToolCall:
        """One OpenAI-format tool call from the backend, or an invalid one saying what is wrong.

        Valid: an object whose ``function`` is an object with a non-empty string ``name`` and
        ``arguments`` that are a JSON string of an object (absent, ``null`` or ``""``: no
        arguments), and whose ``id`` is a string or absent. Anything else (arguments sent as an
        object, a call that is a string, ...) is kept, as text, in an ``InvalidToolCall``: never
        run, and never an exception out of the model call.
        """
        if not isinstance(raw, dict):
            return invalid_tool_call(args=cls._json_text(raw), error="the tool call is not an object")
        function = raw.get("function")
        ident = raw.get("id") if isinstance(raw.get("id"), str) else None
        if not isinstance(function, dict):
            return invalid_tool_call(
                args=cls._json_text(raw),
                id=ident,
                error="the tool call's function is not an object",
            )
        name = function.get("name")
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) or arguments is None else cls._json_text(arguments)
        named = name if isinstance(name, str) else None

        def invalid(error: str) -> InvalidToolCall:
            return invalid_tool_call(name=named, args=text, id=ident, error=error)

        if not named:
            return invalid("the tool call names no function")
        if raw.get("id") is not None and ident is None:
            return invalid("the tool call's id is not a string")
        if not isinstance(arguments, str | None):
            return invalid("the arguments are not a JSON string")
        try:
            args = json.loads(arguments) if arguments else {}
        except (ValueError, RecursionError):
            return invalid("the arguments are not JSON")
        if not isinstance(args, dict):
            return invalid("the arguments are not a JSON object")
        return tool_call(name=named, args=args, id=ident)

    @staticmethod
    def _json_text(value: object) -> str:
        """``value`` (decoded from a backend's JSON) as JSON text, for an ``InvalidToolCall`` to
        show; a placeholder for one nested too deeply to encode (orjson stops at 255 levels, where
        ``json`` would raise ``RecursionError``)."""
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            return "(not shown: nested too deeply)"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(
            self.gate.dispatch(self._payload(messages), tenant=self.tenant, session=_session())
        )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        payload = self._payload(messages)
        return self._result(await self.gate.adispatch(payload, tenant=self.tenant, session=_session()))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The answer as the backend streams it (``Gate.dispatch_stream``); LangChain streams when
        a consumer asks for tokens (LangGraph's ``stream_mode="messages"``), else ``_generate``.
        See ``_Pieces`` for what the chunks hold."""
        pieces = _Pieces()
        for served in self.gate.dispatch_stream(
            self._payload(messages), tenant=self.tenant, session=_session()
        ):
            piece = pieces.of(served)
            if run_manager is not None:
                run_manager.on_llm_new_token(piece.text, chunk=piece)
            yield piece
        yield pieces.tool_calls()

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        pieces = _Pieces()
        payload = self._payload(messages)
        async for served in self.gate.adispatch_stream(payload, tenant=self.tenant, session=_session()):
            piece = pieces.of(served)
            if run_manager is not None:
                await run_manager.on_llm_new_token(piece.text, chunk=piece)
            yield piece
        yield pieces.tool_calls()


def _usage_metadata(usage: Usage) -> UsageMetadata:
    """A backend's reported usage as LangChain's ``usage_metadata``."""
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class _Pieces:
    """A ``DispatchedChatModel`` stream as LangChain's chunks: each backend chunk's text as it
    comes, with the usage on the chunk that carries it; the backend named on the first chunk
    only and the finish reason where sent (LangChain concatenates text values of
    ``response_metadata`` when it adds chunks up).

    Tool calls are not passed on fragment by fragment: LangChain would parse the added-up
    arguments as *partial* JSON, so arguments cut off (``{"amount": 50`` of a call stopped at
    ``max_tokens``) or malformed (``{``) would become a tool call to run, where the same answer
    not streamed is an invalid call (``DispatchedChatModel._tool_call``). The fragments are put
    together by index and judged whole, as the non-streamed answer is, and the calls come on one
    last chunk: the valid in ``tool_calls``, the others in ``invalid_tool_calls`` with their
    arguments as a JSON string (quoted, so that adding up cannot parse them into a call)."""

    def __init__(self) -> None:
        self.named = False
        self.finished = False
        self.calls: dict[object, Any] = {}

    def of(self, served: ChatChunk) -> ChatGenerationChunk:
        for fragment in served.tool_calls:
            self._add(fragment)
        metadata: dict[str, Any] = {}
        if not self.named:
            metadata["backend"] = served.backend
            self.named = True
        if served.finish_reason is not None and not self.finished:
            metadata["finish_reason"] = served.finish_reason  # once: a second would be concatenated
            self.finished = True
        usage = served.usage
        message = AIMessageChunk(
            content=served.content,
            usage_metadata=None if usage is None else _usage_metadata(usage),
            response_metadata=metadata,
        )
        return ChatGenerationChunk(message=message)

    def _add(self, fragment: object) -> None:
        """Add one ``delta.tool_calls`` fragment to the call of its index: the first string id,
        the name and the arguments text joined. A fragment that is no object, whose ``function``
        is no object, or with no integer index stands alone (as a call, it is invalid); a name
        or arguments that are no string are kept as sent, which makes the call invalid."""
        index = fragment.get("index") if isinstance(fragment, Mapping) else None
        function = fragment.get("function", {}) if isinstance(fragment, Mapping) else None
        if (
            not isinstance(fragment, Mapping)
            or not isinstance(function, Mapping)
            or not isinstance(index, int)
            or isinstance(index, bool)
        ):
            self.calls[("alone", len(self.calls))] = fragment
            return
        call = self.calls.get(index)
        if not isinstance(call, _StreamedCall):
            call = self.calls[index] = _StreamedCall()
        call.add(fragment, function)

    def tool_calls(self) -> ChatGenerationChunk:
        """The last chunk: the calls put together, judged as a non-streamed answer's."""
        whole = [call.whole() if isinstance(call, _StreamedCall) else call for call in self.calls.values()]
        calls, invalid = DispatchedChatModel._tool_calls(whole)
        quoted = [
            invalid_tool_call(name=c["name"], args=json.dumps(c["args"] or ""), id=c["id"], error=c["error"])
            for c in invalid
        ]
        return ChatGenerationChunk(
            message=AIMessageChunk(content="", tool_calls=calls, invalid_tool_calls=quoted)
        )


class _StreamedCall:
    """One streamed tool call's fragments put together: the first string id, the name and the
    arguments text joined (in lists, joined once at the end: a backend that sends its arguments
    a character at a time must not cost a copy of all of them per fragment). A name or arguments
    that are no string are kept as sent, which makes the call invalid."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.parts: dict[str, list[str] | object] = {"name": [], "arguments": []}

    def add(self, fragment: Mapping[str, Any], function: Mapping[str, Any]) -> None:
        if self.id is None and isinstance(fragment.get("id"), str):
            self.id = fragment["id"]
        for field, kept in self.parts.items():
            part = function.get(field)
            if isinstance(part, str) and isinstance(kept, list):
                kept.append(part)
            elif part is not None:
                self.parts[field] = part

    def whole(self) -> dict[str, Any]:
        """The call as a non-streamed answer holds it (OpenAI's format)."""
        function = {f: "".join(p) if isinstance(p, list) else p for f, p in self.parts.items()}
        return {"id": self.id, "function": function} if self.id is not None else {"function": function}


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model for offline runs: answer ``n`` is ``turns[n]``, where ``n`` counts
    the AI messages already in the conversation (so a resumed or restarted run picks up where it
    was). Past the script it answers ``final``.

    Token usage is estimated from the text lengths, unless ``served_by`` is a gate with a
    dispatcher: then the prompt really goes to a backend (e.g. ``agentgate.sim`` servers) for as
    many output tokens as the scripted answer holds, and the backend's latency and reported usage
    are the call's. A simulator cannot reason, so the script still decides what is said.
    """

    turns: list[AIMessage]
    final: str = "Done."
    model_name: str = "scripted"
    served_by: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _answer(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any]]:
        n = sum(1 for m in messages if isinstance(m, AIMessage))
        template = self.turns[n] if n < len(self.turns) else AIMessage(content=self.final)
        output = len(str(template.content)) // 4 + 8 * len(template.tool_calls) + 1
        payload = {
            "model": self.model_name,
            "messages": [{"role": _role(m), "content": str(m.content) or "(tool call)"} for m in messages],
            "max_tokens": output,
        }
        message = AIMessage(
            content=template.content,
            tool_calls=[
                {**c, "id": c.get("id") or f"call_{n}_{i}"} for i, c in enumerate(template.tool_calls)
            ],
        )
        return message, payload

    @staticmethod
    def _result(message: AIMessage, prompt: int, output: int, backend: str | None) -> ChatResult:
        message.usage_metadata = {
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": prompt + output,
        }
        if backend is not None:
            message.response_metadata = {"backend": backend}
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _unserved(self, message: AIMessage, payload: dict[str, Any]) -> ChatResult:
        """The scripted answer with estimated usage (about four characters a token), no backend."""
        prompt = sum(len(m["content"]) for m in payload["messages"]) // 4 + 1
        return self._result(message, prompt, payload["max_tokens"], None)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message, payload = self._answer(messages)
        if self.served_by is None:
            return self._unserved(message, payload)
        served = self.served_by.dispatch(payload, session=_session())
        return self._result(
            message, served.usage.prompt_tokens, served.usage.completion_tokens, served.backend
        )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message, payload = self._answer(messages)
        if self.served_by is None:
            return self._unserved(message, payload)
        served = await self.served_by.adispatch(payload, session=_session())
        return self._result(
            message, served.usage.prompt_tokens, served.usage.completion_tokens, served.backend
        )


def _session() -> str | None:
    """The LangGraph thread the model call belongs to, as the dispatcher's session: a
    conversation's turns go back to the backend that holds its prefix in cache. ``None`` outside
    a run, or in a run without a thread id."""
    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # not inside a runnable's context
        return None
    return str(thread) if thread is not None else None


def _role(message: BaseMessage) -> str:
    return {"ai": "assistant", "system": "system"}.get(message.type, "user")
