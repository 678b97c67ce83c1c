"""What a LangGraph request says about the call it carries, read by the middleware and the
delegation tool: the identity in the run's context (``identity_from_context``), the scope a
call runs once in (``_run_id``: the thread and the answer that asked for it, else the task,
``_task_scope``), the answer that asked for a tool call and its version (``_asking_answer``,
``_asked_in``), whether the run keeps checkpoints (``_resumable``), the key of a call running in
this process (``_running_key``, ``_RUNNING_HERE``), an answer that ended before the model
finished it (``_cut_answer``), and what each tool call reads of its answer, read once per answer
(``_answer_calls``)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.prebuilt.tool_node import ToolCallRequest

from agentgate._shown import bounded, escaped
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
        if isinstance(message, AIMessage) and _answer_calls(message).sharing(call_id):
            return message
    return None


@dataclasses.dataclass(frozen=True)
class _AnswerCalls:
    """What the tool hook reads of one model answer for each of its tool calls, read once per
    answer (``_answer_calls``): until review R69 each call of an answer read the whole answer again
    (which calls carry its id, where the model wrote it, the answer's version), so an answer of
    ``N`` calls cost ``N**2`` steps (some 2,000,000 at 1,500 calls)."""

    ids: Mapping[str, int]
    """How many of the answer's tool calls carry each id."""
    written: Mapping[str, object]
    """Each id's first call as the model wrote it, a mapping whose ``arguments`` is the text of its
    arguments (``_written_calls``)."""
    shown: tuple[object, ...]
    """The answer's id and each of its tool calls' id, name and arguments: what its version is a
    digest of."""

    def sharing(self, call_id: object) -> int:
        """How many of the answer's tool calls carry ``call_id``."""
        return self.ids.get(call_id, 0) if isinstance(call_id, str) else 0

    @functools.cached_property
    def version(self) -> str | None:
        """A digest of the answer's id and tool calls (``_asked_in``); ``None`` for calls that
        cannot be encoded (nested too deep). Made when first asked for: most answers' calls run
        without a thread, and need none."""
        try:
            text = json.dumps(self.shown, sort_keys=True, default=repr, ensure_ascii=True)
        except (RecursionError, ValueError):
            # Arguments nested deeper than the encoder's stack reaches (a hostile model's): until
            # review R51 the ``RecursionError`` ended the run with a traceback. No version then;
            # the Gate refuses the call itself, as arguments too deep to digest (``MAX_DEPTH``).
            return None
        return hashlib.sha256(text.encode()).hexdigest()


def _read_calls(answer: AIMessage) -> _AnswerCalls:
    """``_AnswerCalls`` of ``answer``, each call visited once."""
    ids: dict[str, int] = {}
    shown = []
    for call in answer.tool_calls:
        call_id = call.get("id")
        if isinstance(call_id, str):
            ids[call_id] = ids.get(call_id, 0) + 1
        shown.append((call_id, call.get("name"), call.get("args")))
    return _AnswerCalls(ids, _written_calls(answer), (answer.id, shown))


WRITTEN_ARGS_KEY = "agentgate_written_args"
"""The key of an answer's ``response_metadata`` that holds, per tool call id, the text of the
call's arguments as the model streamed them, where the chat model keeps it nowhere in its answer
(langchain-openai's ``ChatOpenAI`` on Chat Completions): the model hook puts it there from the
fragments it watched (``_Streamed.written``), so that it stays with the answer in the run's
state, across a resume too."""


def _written_calls(answer: AIMessage) -> dict[str, object]:
    """Each tool call of ``answer`` as the model wrote it, by id, where the answer keeps it: a
    mapping whose ``arguments`` is the text of the call's arguments. Read from, first found first:
    ``additional_kwargs["tool_calls"]`` (the OpenAI form, its ``function``: ``DispatchedChatModel``,
    streamed or not), the content blocks of type ``function_call`` (the OpenAI Responses API's, by
    ``call_id``: ``ChatOpenAI(use_responses_api=True)``, streamed or not), and
    ``WRITTEN_ARGS_KEY`` (a streamed call whose model keeps no text: ``ChatOpenAI`` on Chat
    Completions). Until review R84 only the first was read, which langchain-openai never fills."""
    written: dict[str, object] = {}
    raw = answer.additional_kwargs.get("tool_calls")
    for call in raw if isinstance(raw, list) else ():
        if isinstance(call, Mapping) and isinstance(call_id := call.get("id"), str):
            written.setdefault(call_id, call.get("function"))
    content = answer.content
    for block in content if isinstance(content, list) else ():
        if (
            isinstance(block, Mapping)
            and block.get("type") == "function_call"
            and isinstance(call_id := block.get("call_id"), str)
        ):
            written.setdefault(call_id, block)
    kept = answer.response_metadata.get(WRITTEN_ARGS_KEY)
    for call_id, text in kept.items() if isinstance(kept, Mapping) else ():
        if isinstance(call_id, str):
            written.setdefault(call_id, {"arguments": text})
    return written


KEPT_ANSWERS = 32
"""How many answers' ``_AnswerCalls`` are kept: the newest read, less those whose answer is gone
(dropped at the next answer read). The tool calls of one answer run at once (LangGraph's tools
node runs them as parallel tasks), so a few cover every answer in flight."""

_ANSWERS: collections.OrderedDict[int, tuple[weakref.ref[AIMessage], _Read, _AnswerCalls]] = (
    collections.OrderedDict()
)
_ANSWERS_LOCK = threading.Lock()


def _answer_calls(answer: AIMessage) -> _AnswerCalls:
    """``_AnswerCalls`` of ``answer``, read once while ``answer`` and what it was read from stay
    as they were (``_Read``). Safe under threads: the tasks of one answer's calls (the sync tools
    node's threads) read it once between them. The newest ``KEPT_ANSWERS`` are kept, each by a
    weak reference to its answer: none is kept alive by it."""
    read = _Read.of(answer)
    with _ANSWERS_LOCK:
        found = _ANSWERS.get(id(answer))
        if found is not None and found[0]() is answer and found[1].same(read):
            _ANSWERS.move_to_end(id(answer))
            return found[2]
        calls = _read_calls(answer)
        for key in [key for key, (ref, _, _) in _ANSWERS.items() if ref() is None]:
            del _ANSWERS[key]
        _ANSWERS[id(answer)] = (weakref.ref(answer), read, calls)
        while len(_ANSWERS) > KEPT_ANSWERS:
            _ANSWERS.popitem(last=False)
        return calls


@dataclasses.dataclass(frozen=True, eq=False)
class _Read:
    """What an answer's ``_AnswerCalls`` were read from: its id, its tool calls and where the calls
    as written are kept (``_written_calls``: the objects themselves, so that one replaced is never
    taken for another at its address) and their lengths (a call appended in place)."""

    answer_id: str | None
    calls: list[Any]
    written: tuple[object, object, object]
    lengths: tuple[int, ...]

    @classmethod
    def of(cls, answer: AIMessage) -> _Read:
        raw = answer.additional_kwargs.get("tool_calls")
        kept = answer.response_metadata.get(WRITTEN_ARGS_KEY)
        written = (raw, answer.content, kept)
        lengths = (len(answer.tool_calls), *(len(w) if isinstance(w, list | dict) else 0 for w in written))
        return cls(answer.id, answer.tool_calls, written, lengths)

    def same(self, other: _Read) -> bool:
        return (
            self.answer_id == other.answer_id
            and self.calls is other.calls
            and all(mine is theirs for mine, theirs in zip(self.written, other.written, strict=True))
            and self.lengths == other.lengths
        )


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
    return _serde_in((getattr(request.runtime, "config", None) or {}).get("configurable") or {})


def _run_serde() -> SerializerProtocol | None:
    """The serializer of the checkpointer the run in progress keeps its state with (a sub-agent's
    run has its parent's), which writes a model's answer when the model's step ends; ``None``
    without one, or outside a run."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # outside a run: nothing is stored
        return None
    return _serde_in(configurable)


def _serde_in(configurable: Mapping[str, Any]) -> SerializerProtocol | None:
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
    version = _answer_calls(answer).version
    return None if version is None else (scope, version)


_RunningKey = tuple[str | None, str | None, str]
"""A tool call as ``_running_key`` names it: its holder, run scope and id."""

_RUNNING_HERE: ContextVar[frozenset[_RunningKey]] = ContextVar("agentgate_running_here", default=frozenset())
"""The calls (``_running_key``) whose run the current context is inside: never waited for."""


def _running_key(request: ToolCallRequest) -> _RunningKey:
    """The holder, run scope and id of a tool call: which call ``GateMiddleware._running`` marks."""
    identity = _request_identity(request)
    return (identity.did if identity else None, _run_id(request), str(request.tool_call.get("id")))


_CUT_AT_LIMIT = re.compile(
    r"(?:length|max_tokens|max_output_tokens|model_length|model_context_window_exceeded)+"
)
"""Finish reasons of an answer stopped at a length limit: OpenAI's, vLLM's, Ollama's ``length``;
Anthropic's, Bedrock's ``max_tokens``; Gemini's ``MAX_TOKENS``; the OpenAI Responses API's
``max_output_tokens`` (its ``incomplete_details.reason``); Mistral's ``model_length`` and
Anthropic's ``model_context_window_exceeded``, the model's context full before the answer was
(compared in lower case)."""

_CUT_BY_FILTER = re.compile(
    r"(?:content_filter|content_filtered|guardrail_intervened|refusal"
    r"|safety|recitation|blocklist|prohibited_content|spii"
    r"|image_safety|image_prohibited_content|image_recitation)+"
)
"""Finish reasons of an answer a provider's filter stopped before the model finished it: OpenAI's
and Azure's ``content_filter`` (a finish reason, or the Responses API's incomplete reason);
Anthropic's ``refusal``; Bedrock's ``content_filtered`` and ``guardrail_intervened``; Gemini's
``SAFETY``, ``RECITATION``, ``BLOCKLIST``, ``PROHIBITED_CONTENT``, ``SPII``, and for an image it
generated ``IMAGE_SAFETY``, ``IMAGE_PROHIBITED_CONTENT``, ``IMAGE_RECITATION`` (compared in lower
case). Its tool calls may be cut as an answer stopped at its output limit is."""

MAX_REASON_SHOWN = 80
"""The most characters of a provider's reason that the refusal of a cut answer's call quotes
(``_reason_shown``)."""

_INCOMPLETE = re.compile(r"(?:incomplete)+")
"""The ``status`` of an OpenAI Responses API answer that ended before the model finished it
(``response.incomplete``), whatever the reason its ``incomplete_details`` gives: it has no
``finish_reason``."""


def _cut_answer(answer: AIMessage | None) -> str | None:
    """Why none of the tool calls of ``answer`` is run, when it ended before the model finished
    it: at its output limit (``_CUT_CALL``), stopped by its provider's filter
    (``_FILTERED_CALL``), or marked incomplete by the OpenAI Responses API for another reason
    (``_INCOMPLETE_CALL``); else ``None``. Read from ``response_metadata``: ``finish_reason``,
    ``stop_reason``, ``done_reason``, ``stopReason``, and the Responses API's ``status`` and
    ``incomplete_details.reason`` (until review R84 these two were not read, so a streamed
    Responses API answer cut at ``max_output_tokens`` ran its calls on arguments LangChain had
    read as partial JSON)."""
    if answer is None:
        return None
    metadata = answer.response_metadata
    reasons: list[str] = []
    for field in ("finish_reason", "stop_reason", "done_reason", "stopReason"):
        if isinstance(reason := metadata.get(field), str):
            reasons.append(reason)
    status = metadata.get("status")
    incomplete = isinstance(status, str) and _INCOMPLETE.fullmatch(status.lower()) is not None
    if incomplete:
        details = metadata.get("incomplete_details")
        said = details.get("reason") if isinstance(details, Mapping) else None
        reasons.append(said if isinstance(said, str) and said else "incomplete")
    for reason in reasons:
        # Matched repeated too: LangChain concatenates the text of chunks' metadata it adds up, so a
        # stream that said it twice says ``lengthlength``.
        lower = reason.lower()
        if _CUT_AT_LIMIT.fullmatch(lower):
            return _CUT_CALL.format(reason=_reason_shown(reason, lower))
        if _CUT_BY_FILTER.fullmatch(lower):
            return _FILTERED_CALL.format(reason=_reason_shown(reason, lower))
    if not incomplete:
        return None
    return _INCOMPLETE_CALL.format(reason=_reason_shown(reasons[-1], reasons[-1].lower()))


def _reason_shown(reason: str, lower: str) -> str:
    """A provider's reason as the model is told it and the refusal records it: once where a stream
    said it over and over (LangChain concatenates it: ``lengthlength...``), at most
    ``MAX_REASON_SHOWN`` characters (``bounded``), each character that is not printable escaped.
    Until review R84 it was quoted whole: a stream that set its finish reason on each of 200,000
    chunks made a refusal of 1.2 MB, told to the model and written to the audit log. ``lower``:
    ``reason`` in lower case, as the caller matched it."""
    period = (lower + lower).find(lower, 1)  # the shortest text it repeats, ``len(lower)`` if none
    return escaped(bounded(reason[:period], MAX_REASON_SHOWN))


_CUT_CALL = (
    "the model's answer was cut at its output limit ({reason}) while it wrote its tool calls: "
    "their arguments may be incomplete, so none of them is run; ask again with a larger output "
    "limit or fewer calls at once"
)
"""Why a tool call of an answer stopped at its output limit is refused before it is decided. A
streamed answer's tool call arguments are parsed by LangChain as *partial* JSON: ``{"amount": 50``
of what was to be 5000 becomes a call with ``amount`` 50."""

_FILTERED_CALL = (
    "the model's answer was stopped by its provider's filter ({reason}) before it was complete: "
    "its tool calls' arguments may be incomplete, so none of them is run; ask again"
)
"""Why a tool call of an answer a provider's filter stopped (``_CUT_BY_FILTER``) is refused
before it is decided: its arguments may be cut as those of an answer stopped at its output limit."""

_INCOMPLETE_CALL = (
    "the model's answer is marked incomplete ({reason}): its tool calls' arguments may be "
    "incomplete, so none of them is run; ask again"
)
"""Why a tool call of an OpenAI Responses API answer whose status is ``incomplete`` for a reason
neither an output limit nor a filter is refused before it is decided."""


def _calls_sharing(answer: AIMessage | None, call_id: str) -> int:
    """How many of ``answer``'s tool calls carry ``call_id`` (0 without an answer)."""
    return 0 if answer is None else _answer_calls(answer).sharing(call_id)


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
