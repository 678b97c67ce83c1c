"""What a LangGraph request says about the call it carries, read by the middleware and the
delegation tool: the identity in the run's context (``identity_from_context``), the scope a
call runs once in (``_run_id``: the thread and the answer that asked for it, else the task,
``_task_scope``), the answer that asked for a tool call and its version (``_asking_answer``,
``_asked_in``), whether the run keeps checkpoints (``_resumable``), the key of a call running in
this process (``_running_key``, ``_RUNNING_HERE``), and an answer cut at its output limit
(``_cut_at_limit``)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.prebuilt.tool_node import ToolCallRequest

from agentgate.gate import AgentIdentity


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


def _checkpoint_serde(request: ToolCallRequest) -> SerializerProtocol | None:
    """The serializer of the checkpointer the call's run keeps its state with (a sub-agent's run
    has its parent's), which writes the call's result when its step ends; ``None`` without one."""
    configurable = (getattr(request.runtime, "config", None) or {}).get("configurable") or {}
    serde = getattr(configurable.get(CONFIG_KEY_CHECKPOINTER), "serde", None)
    return serde if isinstance(serde, SerializerProtocol) else None


def _asked_in(request: ToolCallRequest) -> tuple[str, str] | None:
    """Where the call's id names one call across edits of the answer that asked for it (the
    thread and the outer tasks), and the version of that answer (its id and a digest of its tool
    calls): what the Gate closes the approval requests of edited or replaced calls by
    (``Gate.authorize``'s ``asked_in``; an answer edited in place with ``update_state`` keeps its
    id, one appended in its place gets another). ``None`` without a thread or an asking answer,
    or for an answer whose calls cannot be encoded (nested too deep)."""
    scope, answer = _thread_scope(request), _asking_answer(request)
    if scope is None or answer is None:
        return None
    calls = [(c.get("id"), c.get("name"), c.get("args")) for c in answer.tool_calls]
    try:
        shown = json.dumps([answer.id, calls], sort_keys=True, default=repr, ensure_ascii=True)
    except (RecursionError, ValueError):
        # Arguments nested deeper than the encoder's stack reaches (a hostile model's): until
        # review R51 the ``RecursionError`` ended the run with a traceback. No version then; the
        # Gate refuses the call itself, as arguments too deep to digest (``MAX_DEPTH``).
        return None
    return scope, hashlib.sha256(shown.encode()).hexdigest()


_RUNNING_HERE: ContextVar[frozenset[tuple[str | None, str | None, str]]] = ContextVar(
    "agentgate_running_here", default=frozenset()
)
"""The calls (``_running_key``) whose run the current context is inside: never waited for."""


def _running_key(request: ToolCallRequest) -> tuple[str | None, str | None, str]:
    """The holder, run scope and id of a tool call: which call ``GateMiddleware._running`` marks."""
    identity = _request_identity(request)
    return (identity.did if identity else None, _run_id(request), str(request.tool_call.get("id")))


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


def _calls_sharing(answer: AIMessage | None, call_id: str) -> int:
    """How many of ``answer``'s tool calls carry ``call_id`` (0 without an answer)."""
    if answer is None:
        return 0
    return sum(1 for call in answer.tool_calls if call.get("id") == call_id)


_SHARED_ID = (
    "the model's answer gives the tool call id {call_id!r} to {count} calls: a call id names one "
    "call, so none of them is run; ask again with a distinct id for each call"
)
"""Why the tool calls of one answer that share an id are refused before they are decided. Until
review R52 what ran depended on how the agent was run: under ``create_agent`` each call is a task
of its own, so without a checkpointer both ran (a payment asked twice under one id paid twice)
and with one the second was refused as already run; in one ``gated_tool_node`` task the second
was refused as already run when its arguments were the same, and ran when they differed; and
their answers, bound to the call by its id, could not be told apart."""


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
