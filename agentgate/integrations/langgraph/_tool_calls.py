"""What a tool-call request asks: the call to decide (``_tool_call_of``, ``_model_args``), the tool
running it (``_running_tool``), and what makes a request unusable, refused before it is decided
(``_refused_call``, ``_unusable_answer``, ``_inexact_arguments``, ``_no_such_tool``)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from agentgate._json import inexact_argument
from agentgate.capabilities import MAX_NAME_LENGTH, Call
from agentgate.errors import InputError
from agentgate.integrations.langgraph._scope import (
    _CUT_CALL,
    _SHARED_ID,
    _asking_answer,
    _calls_sharing,
    _cut_at_limit,
)


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
