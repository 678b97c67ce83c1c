"""The model-call half of ``GateMiddleware`` (``_ModelCalls``): a model call decided with the
tokens it sends and may answer with, run under the gate, its usage committed, its answer made fit
for the run's state (``_storable``); with what it counts (``_sent_chars``, ``_media_tokens``) and
the model's name (``_model_name``, ``_check_model_name``)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.structured_output import (
    AutoStrategy,
    ProviderStrategy,
    StructuredOutputError,
    ToolStrategy,
)
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.errors import GraphBubbleUp

from agentgate._json import integral
from agentgate._shown import quoted
from agentgate.capabilities import Call
from agentgate.dispatch.prefix import (
    CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    audio_tokens,
    media_part_tokens,
    prompt_tokens_most,
    split_media,
)
from agentgate.errors import CapabilityError, InputError
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.gate._outcomes import USAGE_UNREAD
from agentgate.integrations.langgraph._calls import (
    _WATCHED,
    _answer,
    _Cut,
    _cut_failure,
    _Streamed,
    _tokens_or_cut,
)
from agentgate.integrations.langgraph._models import USAGE_STALE, DispatchedChatModel, ScriptedChatModel
from agentgate.integrations.langgraph._replies import _explained
from agentgate.integrations.langgraph._scope import _run_serde, identity_from_context
from agentgate.integrations.langgraph._stops import _run_messages, _run_stop, _stop_mark
from agentgate.integrations.langgraph._structured import _structured_in_range
from agentgate.integrations.langgraph._tool_calls import _invalid_calls, _storable_answer, _with_written_args

R = TypeVar("R")
D = TypeVar("D")


class _ModelCalls:
    """The part of ``GateMiddleware`` that decides, runs and settles model calls
    (``wrap_model_call``, ``awrap_model_call``)."""

    # The middleware's state this part reads (``GateMiddleware.__init__`` sets it).
    gate: Gate
    agent: str
    model: str | None
    named: BaseChatModel | None
    max_tokens: int
    gate_models: bool
    _usage_copies: dict[int, tuple[weakref.ref[BaseChatModel], BaseChatModel]]
    _schema_sizes: dict[int, tuple[weakref.ref[BaseTool], int]]

    if TYPE_CHECKING:  # what this part calls of the middleware's other parts

        def _authorize(self, identity: AgentIdentity | None, call: Call, **context: Any) -> Authorization: ...

        async def _decided(
            self, decide: Callable[[R], D], request: R, auth_of: Callable[[D], Authorization]
        ) -> D: ...

    def _model_call(self, request: ModelRequest[Any]) -> Call:
        """The model call to decide: ``model:NAME`` with the output limit it will run with (the
        request's ``max_tokens``, else the chat model's own, else the middleware's), or the
        largest limit the request sends besides it (``_limits_sent``), which a backend may honour
        in its place. Raises ``InputError`` naming a limit that is no whole number above 0
        (``_output_limit``; until review R88b quoted by its whole ``repr``: a bare ``ValueError``
        for ``-10**5000``, a 1 MB message for a 1 MB text)."""
        named = self.model is not None and (self.named is None or request.model is self.named)
        name = self.model if named else _model_name(request.model)
        configured = integral(getattr(request.model, "max_tokens", None))
        own = configured if type(configured) is int and configured > 0 else None
        asked = request.model_settings.get("max_tokens")
        # Only a limit left out (``None``) falls back: until review R81 ``0`` did too (to the
        # model's own, else 1024) and the chat model's own ``4096.0`` was passed over.
        limit = (
            _output_limit(self.agent, "max_tokens", asked) if asked is not None else own or self.max_tokens
        )
        for where, value in _limits_sent(request):
            limit = max(limit, _output_limit(self.agent, where, value))
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
        dispatched = isinstance(request.model, DispatchedChatModel) or (
            self.gate.dispatches and not isinstance(request.model, ScriptedChatModel)
        )
        # A call the gate's dispatcher sends is charged at most the prompt its payload can hold,
        # whatever the backend reports (until review R67 as reported: 10^8 prompt tokens for a
        # two-word prompt spent the agent's budget); the gateway bounds its calls the same way.
        most = self._dispatched_prompt_most(request, call, sent) if dispatched else None
        auth = self._authorize(identity, call, tokens=(prompt, call.args["max_tokens"]), prompt_most=most)
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

    def _dispatched_prompt_most(
        self, request: ModelRequest[Any], call: Call, sent: Sequence[BaseMessage]
    ) -> int | None:
        """``prompt_tokens_most`` of the payload a ``DispatchedChatModel`` sends for ``request``
        (``sent``: its messages, the system message first): the request's tools and the tools of
        a structured output (``_format_tools``), as LangChain binds them. ``None`` where the
        payload cannot be made (the model call fails on it, not the gate)."""
        model = request.model
        if not isinstance(model, DispatchedChatModel):
            model = DispatchedChatModel(
                gate=self.gate,
                model_name=call.resource.removeprefix("model:"),
                max_tokens=call.args["max_tokens"],
            )
        try:
            tools = [*request.tools, *_format_tools(request.response_format)]
            payload = (model.bind_tools(tools) if tools else model)._payload(list(sent))
            return prompt_tokens_most(len(orjson.dumps(payload, default=str)), payload)
        except Exception:
            return None

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

    def _record_invalid(self, request: ModelRequest[Any], response: R) -> R:
        """``response``, once each tool call of it that LangChain never routes to the tools (an
        ``invalid_tool_calls`` entry: arguments that are no JSON object) is recorded as a refusal
        (``_invalid_calls``: a ``deny`` entry by the run's identity naming the tool and why, never
        an allow; the model is told at its next turn, by LangChain, that the call was malformed,
        and an answer holding only such calls ends the run). Until review R68 such a call left no
        trace in the audit log. The answer's refusals (at most ``INVALID_CALLS_NAMED`` and one)
        share one transaction; one whose entry cannot be encoded (``InputError``) is not recorded;
        a store that cannot write raises, as for any decision."""
        messages = response.result if isinstance(response, ModelResponse) else [response]
        invalid = [found for m in messages if isinstance(m, AIMessage) for found in _invalid_calls(m)]
        if invalid:
            # One transaction for the answer's refusals, however many (until review R69 one each:
            # an answer of thousands cost thousands of commits). Without the calls' ids: a refusal
            # with one closes the approval request open for that id and call, which here (no
            # arguments) could be another run's request for a tool that takes none, under a model
            # that numbers its calls alike.
            identity = identity_from_context(request.runtime.context)
            try:
                self.gate.record_refusals(identity, invalid)
            except InputError:  # one entry cannot be encoded: the others are written one by one
                for call, reasons in invalid:
                    with contextlib.suppress(InputError):
                        self.gate.record_refusal(identity, call, reasons)
        return response

    async def _arecord_invalid(self, request: ModelRequest[Any], response: R) -> R:
        """The async twin of ``_record_invalid``: the records are written on a worker thread."""
        return await self.gate.to_thread(self._record_invalid, request, response)

    def _stopped(self, auth: Authorization) -> ModelResponse[Any]:
        """The answer that ends the run on a refused model call."""
        return self._last_word(_explained(auth), _stop_mark(auth, self.gate))

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
        watch = _Streamed()
        watching = _WATCHED.set(watch)
        try:
            if not self.gate_models:
                answered = _structured_in_range(handler(request), request.response_format)
                return self._record_invalid(request, _storable(answered, watch.written()))
            auth, request = self._authorize_model(request)
            if not auth.allowed:
                return self._stopped(auth)

            def call() -> ModelResponse[Any] | _Cut:
                try:
                    return _structured_in_range(handler(request), request.response_format)
                except GraphBubbleUp:
                    raise
                except StructuredOutputError as exc:  # the model answered, unparsable: it ran (``_Cut``)
                    return _Cut(exc)
                except Exception as exc:
                    if watch.delivered:
                        return _Cut(exc)
                    raise

            answered = _answer(self.gate.run(auth, call, spent=_spent, failed=_cut_failure))
            return self._record_invalid(request, _storable(answered, watch.written()))
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
        watch = _Streamed()
        watching = _WATCHED.set(watch)
        try:
            if not self.gate_models:
                answered = _structured_in_range(await handler(request), request.response_format)
                return await self._arecord_invalid(request, _storable(answered, watch.written()))
            auth, request = await self._decided(self._authorize_model, request, lambda decided: decided[0])
            if not auth.allowed:
                return self._stopped(auth)

            async def call() -> ModelResponse[Any] | _Cut:
                try:
                    return _structured_in_range(await handler(request), request.response_format)
                except GraphBubbleUp:
                    raise
                except StructuredOutputError as exc:  # the model answered, unparsable: it ran (``_Cut``)
                    return _Cut(exc)
                except Exception as exc:
                    if watch.delivered:
                        return _Cut(exc)
                    raise

            answered = _answer(await self.gate.arun(auth, call, spent=_spent, failed=_cut_failure))
            return await self._arecord_invalid(request, _storable(answered, watch.written()))
        finally:
            _WATCHED.reset(watching)


def _output_limit(agent: str, where: str, value: object) -> int:
    """``value``, an output limit set at ``where``, as the whole number of tokens above 0 it is
    (``512.0`` is 512: ``integral``). Raises ``InputError`` naming ``where`` for anything else
    (``int()`` raised on inf and NaN, cut 0.5 to 0), ``value`` quoted as ``quoted`` does: the one
    check of the middleware's ``max_tokens`` and of each limit a model call sends."""
    limit = integral(value)
    if type(limit) is not int or limit <= 0:
        raise InputError(f"agentgate[{agent}]: {where} must be a whole number > 0, got {quoted(value)}")
    return limit


_LIMIT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""The names of an output limit in an OpenAI request: Chat Completions' two, which vLLM, SGLang
and llama.cpp read too, and the Responses API's ``max_output_tokens`` (langchain-openai sends the
decided ``max_tokens`` under that name to the Responses API; until review R88b a
``max_output_tokens`` set besides it was not read, so ``ChatOpenAI(use_responses_api=True,
extra_body={"max_output_tokens": 100000})`` was decided at 200 and sent 100000)."""


def _limits_sent(request: ModelRequest[Any]) -> list[tuple[str, object]]:
    """The output limits ``request`` sends besides its ``max_tokens`` (which the middleware sets
    to the limit decided), by where each is set: the request's ``max_completion_tokens`` and
    ``max_output_tokens``, the chat model's ``model_kwargs`` (merged into the request body), and the ``extra_body`` sent
    (the request's, else the chat model's: langchain-openai merges it over the body last, so its
    limit is the one sent). A backend may honour any of them in place of ``max_tokens``: until
    review R88 ``ChatOpenAI(extra_body={"max_completion_tokens": 100000})`` was decided and
    charged at a ``max_tokens`` of 200 and generated 5,000 tokens, charged 200. Limits set to
    ``None`` are left out, as the request leaves them out."""
    settings = request.model_settings
    found: list[tuple[str, object]] = [
        (f"model_settings[{key!r}]", settings[key])
        for key in _LIMIT_KEYS
        if key != "max_tokens" and settings.get(key) is not None
    ]
    places: list[tuple[str, object]] = [
        ("the chat model's model_kwargs", getattr(request.model, "model_kwargs", None))
    ]
    if "extra_body" in settings:
        places.append(("model_settings['extra_body']", settings["extra_body"]))
    else:
        places.append(("the chat model's extra_body", getattr(request.model, "extra_body", None)))
    for where, given in places:
        if isinstance(given, Mapping):
            found.extend(
                (f"{where}[{key!r}]", given[key]) for key in _LIMIT_KEYS if given.get(key) is not None
            )
    return found


def _format_tools(response_format: object) -> list[dict[str, Any]]:
    """The tools LangChain binds for a structured output (``ToolStrategy``, or an ``AutoStrategy``
    or bare schema a ``DispatchedChatModel`` gets as one), in OpenAI's format; none for a
    ``ProviderStrategy`` (its schema goes to a model's own option, which ``DispatchedChatModel``
    does not send) or no structured output."""
    if response_format is None or isinstance(response_format, ProviderStrategy):
        return []
    if not isinstance(response_format, ToolStrategy):
        schema = response_format.schema if isinstance(response_format, AutoStrategy) else response_format
        response_format = ToolStrategy(cast(Any, schema))
    return [
        {
            "type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": spec.json_schema},
        }
        for spec in response_format.schema_specs
    ]


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


def _spent(response: ModelResponse[Any] | AIMessage | _Cut) -> tuple[int, int] | None:
    """What a model call used (``_tokens_or_cut``), but ``USAGE_UNREAD`` for a dispatched stream
    whose last usage was followed by more output (``USAGE_STALE``): charged as reserved, its
    outcome saying "its usage could not be read", as the gateway's for the same stream (until
    review R58 "no usage was reported", the reason of a stream that reported none)."""
    if not isinstance(response, _Cut):
        messages = response.result if isinstance(response, ModelResponse) else [response]
        metadata = [getattr(m, "response_metadata", None) for m in messages]
        if any(isinstance(meta, Mapping) and meta.get(USAGE_STALE) is True for meta in metadata):
            return USAGE_UNREAD
    return _tokens_or_cut(response)


def _storable(response: R, written: Mapping[str, str]) -> R:
    """``response`` (a ``ModelResponse``, or an ``AIMessage`` as a middleware may answer) with each
    answer keeping the text ``written`` of its streamed tool calls' arguments that it keeps
    nowhere (``_with_written_args``: langchain-openai's ``ChatOpenAI`` on Chat Completions parses
    it and drops it, so until review R84 a number no float holds as written,
    ``500.00000000000000001`` against ``amount<=500``, was decided as the float it was read as),
    and as the run's state can keep it (``_storable_answer``): a tool call whose arguments hold
    an integer beyond 64 bits kept with that integer as text and marked refused, which the tool
    hook then refuses before it is decided, telling the model why (until review R58 LangGraph's
    checkpointer failed to store the answer and the run ended in a ``TypeError``); such an
    integer in the answer's metadata kept as text, in its ``usage_metadata`` left out (until
    review R59 the same ``TypeError``); and, where the run has a checkpointer (its serializer,
    ``_run_serde``), anything else it cannot write left out, a tool call whose arguments it cannot
    write (a key holding a lone surrogate, objects nested too deep), or would give back changed (a
    lone surrogate in a value, written as ``?``), kept without them and marked refused, as the
    tool hook does with a result it cannot write (until review R89 the same ``TypeError``).
    ``response`` itself when no answer changes (the usual case). Raises ``InputError`` for an
    answer that cannot be made storable (``_unstorable_left_out``)."""
    if isinstance(response, AIMessage):
        return cast(R, _storable_answer(_with_written_args(response, written), _run_serde()))
    if not isinstance(response, ModelResponse):
        return response
    serde = _run_serde()
    result = [
        _storable_answer(_with_written_args(m, written), serde) if isinstance(m, AIMessage) else m
        for m in response.result
    ]
    if all(new is old for new, old in zip(result, response.result, strict=True)):
        return response
    return cast(R, ModelResponse(result=result, structured_response=response.structured_response))


def _model_name(model: BaseChatModel) -> str:
    """The name a chat model was given: ``model_name`` (ChatOpenAI, ChatGroq), ``model``
    (ChatOllama, ChatAnthropic, ChatGoogleGenerativeAI), ``model_id`` (ChatBedrock,
    ChatHuggingFace), else its LangChain type."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type
