"""The chat models of the integration: ``DispatchedChatModel`` (served through the gate's
dispatcher; its streamed tool calls put together whole by ``_Pieces`` and ``_StreamedCall``) and
``ScriptedChatModel`` (deterministic, for offline examples, tests and benchmarks); both name the
run's thread as the dispatcher's session (``_session``)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import orjson
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    UsageMetadata,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from pydantic import Field, field_validator

# From the dispatch layer's value modules, not ``dispatch.backends``, which re-exports them beside
# the HTTP clients (aiohttp, httpx): an agent without a dispatcher loads none of those (review R65).
from agentgate._shown import quoted
from agentgate.dispatch._answers import ChatChunk, Usage, reports_usage
from agentgate.dispatch._sse import _StreamUsage, carries_output
from agentgate.errors import BackendFailed
from agentgate.gate._dispatching import MAX_SESSION_CHARS, check_tenant
from agentgate.integrations.langgraph._calls import _WATCHED

USAGE_STALE = "usage_stale"
"""The ``response_metadata`` key (``True``) of a streamed answer whose last usage reported was
followed by more output (``_StreamUsage``): it carries no ``usage_metadata``, and the middleware
charges it as reserved with the reason the gateway gives the same stream ("the call ran but its
usage could not be read"), not that of a stream that reported none."""


class DispatchedChatModel(BaseChatModel):
    """A chat model served through the gate's dispatcher: the router picks the backend (an
    OpenAI-compatible server: vLLM, SGLang, TGI, llama.cpp) for each call. Tools bound to it are
    sent in OpenAI's format and tool calls in the answer are parsed back."""

    gate: Any
    model_name: str
    max_tokens: int = 1024
    tenant: str = "default"
    tools: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("tenant", mode="before")
    @classmethod
    def _tenant_is_a_name(cls, tenant: object) -> object:
        """``InputError`` (not a validation error) for a tenant the gate would refuse at each
        call (``check_tenant``): refused where the model is made, as ``Gate.dispatch`` refuses it."""
        check_tenant(tenant)
        return tenant

    @property
    def _llm_type(self) -> str:
        return "agentgate-dispatched"

    def bind_tools(self, tools: Any, **kwargs: Any) -> DispatchedChatModel:  # type: ignore[override, unused-ignore]
        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _payload(self, messages: list[BaseMessage]) -> dict[str, Any]:
        """The chat payload of ``messages``; first ``InputError`` for a tenant that is no name
        (``check_tenant``): ``model_copy(update={"tenant": ...})`` runs no validator, so until
        review R57 a copy carried whatever tenant it was given to the gate, or to any object
        standing in for one. Every call builds its payload before it asks the gate."""
        check_tenant(self.tenant)
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

        The reasoning of a reasoning model (``_reasoning``) is in ``additional_kwargs`` under
        ``reasoning_content``, where LangChain's message content blocks read it; it is no part of
        the usage, which is the backend's (its completion tokens count the reasoning already).

        Raises ``BackendFailed`` when ``tool_calls`` is neither a list nor absent or ``null``, or
        the reasoning is not a string.
        """
        message_body = served.body["choices"][0]["message"]  # an object: BackendClient.chat checked
        # Absent or null alone is no call, as the stream reader reads a delta's (``_tool_calls``):
        # until review R88 a falsy one that is no list (``{}``, ``0``, ``false``, ``""``) was none.
        raw_calls = message_body.get("tool_calls")
        if raw_calls is None:
            raw_calls = []
        if not isinstance(raw_calls, list):
            # Quoted (``quoted``): until review R88c ``repr`` of one nested 1,000 deep (orjson
            # reads 1,024 levels) was a bare ``RecursionError`` out of the refusal.
            raise BackendFailed(f"{served.backend}: tool_calls is not a list: {quoted(raw_calls)}")
        calls, invalid = DispatchedChatModel._tool_calls(raw_calls)
        usage = served.usage
        # The calls as the backend wrote them, in the OpenAI form (which langchain-openai does not
        # keep): the middleware reads each call's arguments text for numbers no float holds.
        kept: dict[str, Any] = {"tool_calls": raw_calls} if raw_calls else {}
        if reasoning := _reasoning(served.backend, message_body):
            kept[REASONING] = reasoning
        message = AIMessage(
            content=served.content,
            tool_calls=calls,
            invalid_tool_calls=invalid,
            additional_kwargs=kept,
            # None for a usage that leaves out a count (``reports_usage``): charged as reserved,
            # not its prompt free as 0 tokens (until review R68).
            usage_metadata=_usage_metadata(usage) if reports_usage(served.body.get("usage")) else None,
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
            _watched_output(served)  # first: a chunk ``of`` refuses was sent all the same
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
            _watched_output(served)  # first: a chunk ``of`` refuses was sent all the same
            piece = pieces.of(served)
            if run_manager is not None:
                await run_manager.on_llm_new_token(piece.text, chunk=piece)
            yield piece
        yield pieces.tool_calls()


def _watched_output(served: ChatChunk) -> None:
    """Tell the middleware's watch of this model call (``_WATCHED``), if one is set, that
    ``served`` carried output by the rule of the dispatcher and the gateway (``carries_output``):
    a tool call fragment with any text (an id, a name, arguments), which this model does not hand
    LangChain's callbacks as it comes, or any other text in the delta but its role, counts as
    content does, so a stream cut after it is charged as reserved, as the gateway
    charges it (until review R58 the watch saw nothing, and the call was released)."""
    watch = _WATCHED.get()
    if watch is not None and not watch.delivered and carries_output(served):
        watch.delivered = True


REASONING = "reasoning_content"
"""The ``additional_kwargs`` key of an answer's reasoning: where LangChain's content blocks read
it (``AIMessage.content_blocks``: a ``reasoning`` block), as its DeepSeek, Ollama, xAI and Groq
models put it. Streamed, each chunk carries its piece, and LangChain joins them as it adds the
chunks up."""
REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where an engine's reasoning parser puts the reasoning of an answer's ``message`` or a stream's
``delta``: SGLang's (and vLLM's before v0.11) ``reasoning_content``, vLLM's ``reasoning``."""


def _reasoning(backend: str, part: Mapping[str, Any]) -> str:
    """The reasoning in ``part`` (an answer's ``message``, a stream's ``delta``): the first of
    ``REASONING_FIELDS`` with text, once: a vLLM that sends both names sends the same text twice.
    Empty when there is none. Raises ``BackendFailed`` for one that is not a string (as for
    content that is not: ``BackendClient.chat``)."""
    found = ""
    for name in REASONING_FIELDS:
        value = part.get(name)
        if value is not None and not isinstance(value, str):
            # Quoted (``quoted``): until review R88c ``repr`` of an answer's reasoning nested 1,000
            # deep was a bare ``RecursionError`` out of the refusal.
            raise BackendFailed(f"{backend}: {name} is not a string: {quoted(value)}")
        found = found or value or ""
    return found


def _delta(served: ChatChunk) -> Mapping[str, Any]:
    """The delta of a streamed chunk's first choice, as the backend sent it (empty if none)."""
    choices = served.event.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    delta = choice.get("delta") if isinstance(choice, Mapping) else None
    return delta if isinstance(delta, Mapping) else {}


def _usage_metadata(usage: Usage) -> UsageMetadata:
    """A backend's reported usage as LangChain's ``usage_metadata``."""
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class _Pieces:
    """A ``DispatchedChatModel`` stream as LangChain's chunks: each backend chunk's text and
    reasoning (``REASONING``) as they come; the backend named on the first chunk only and the finish reason where sent (LangChain
    concatenates text values of ``response_metadata`` when it adds chunks up).

    The usage comes once, on the last chunk: the last the backend reported, which the call is
    charged, unless output came after it (``_StreamUsage``: a usage counts the output sent with it
    and before it, so a stale one is none, and the call is charged its reservation, as the gateway
    charges it; until review R57 a backend reporting zero usage first, then streaming its answer,
    was charged nothing in-process). LangChain adds up the
    ``usage_metadata`` of the chunks it adds up, so a usage passed on each time the backend
    sent one (said twice, or a running total on every chunk, as vLLM's
    ``continuous_usage_stats``) was counted as many times, and the middleware charged the sum.

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
        self.usage = _StreamUsage()

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
        self.usage.see(served)
        reasoning = _reasoning(served.backend, _delta(served))
        message = AIMessageChunk(
            content=served.content,
            additional_kwargs={REASONING: reasoning} if reasoning else {},
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
        """The last chunk: the calls put together, judged as a non-streamed answer's, and the
        last usage reported, unless output came after it (none then, and ``USAGE_STALE`` in its
        ``response_metadata``)."""
        whole = [call.whole() if isinstance(call, _StreamedCall) else call for call in self.calls.values()]
        calls, invalid = DispatchedChatModel._tool_calls(whole)
        quoted = [
            invalid_tool_call(name=c["name"], args=json.dumps(c["args"] or ""), id=c["id"], error=c["error"])
            for c in invalid
        ]
        return ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_calls=calls,
                invalid_tool_calls=quoted,
                usage_metadata=None if (usage := self.usage.usage) is None else _usage_metadata(usage),
                # As a whole answer keeps them (``_result``): the calls as the backend wrote them.
                additional_kwargs={"tool_calls": whole} if whole else {},
                # What the middleware reads to give the gateway's reason for the same stream.
                response_metadata={USAGE_STALE: True} if self.usage.stale else {},
            )
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

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override, unused-ignore]
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


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: no UTF-8 text holds it, and the gate takes no session holding one."""


def _session() -> str | None:
    """The LangGraph thread the model call belongs to, as the dispatcher's session: a
    conversation's turns go back to the backend that holds its prefix in cache. ``None`` outside
    a run, or in a run without a thread id. A thread id longer than ``MAX_SESSION_CHARS`` or
    holding a lone surrogate is named by its SHA-256 (``sha256:`` and 64 hex digits)."""
    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # not inside a runnable's context
        return None
    if thread is None:
        return None
    text = str(thread)
    if len(text) <= MAX_SESSION_CHARS and not _SURROGATE.search(text):
        return text
    # A thread id the gate takes as no session (``check_session``): one per thread all the same.
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _role(message: BaseMessage) -> str:
    return {"ai": "assistant", "system": "system"}.get(message.type, "user")
