"""What a tool-call request asks: the call to decide (``_tool_call_of``, ``_model_args``), the tool
running it (``_running_tool``), and what makes a request unusable, refused before it is decided
(``_refused_call``, ``_unusable_answer``, ``_unread_arguments``, ``_inexact_arguments``,
``_out_of_range``, ``_unstorable_arguments``, ``_no_such_tool``); and a model's answer and a
tool's made fit for a checkpointer (``_storable_answer``, ``_storable_result``)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from pydantic import BaseModel

from agentgate._json import exact_float, inexact_argument, inexact_read, inexact_said
from agentgate._shown import quoted
from agentgate.capabilities import MAX_NAME_LENGTH, Call
from agentgate.errors import InputError
from agentgate.integrations.langgraph._calls import _read_message, _update_messages
from agentgate.integrations.langgraph._scope import (
    _SHARED_ID,
    WRITTEN_ARGS_KEY,
    _answer_calls,
    _asking_answer,
    _calls_sharing,
    _cut_answer,
    _written_calls,
)

R = TypeVar("R")


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
    if not isinstance(args, Mapping) or not args:
        return args
    injected = _injected_names(request, args)
    if not injected.intersection(args):
        return args
    return {name: value for name, value in args.items() if name not in injected}


def _injected_names(request: ToolCallRequest, args: Mapping[str, Any] | None = None) -> frozenset[str]:
    """The names of the arguments LangGraph injects into ``request``'s tool (in its input schema,
    not in the schema the model is shown); none for a tool LangChain cannot build a schema of.
    With ``args`` (the call's arguments), none when they hold only what the model is shown: the
    usual call, read without building the input schema."""
    tool = request.tool
    if tool is None:
        return frozenset()
    try:
        shown = tool.tool_call_schema  # memoized by LangChain
        if isinstance(shown, dict) or not hasattr(shown, "model_fields"):
            return frozenset()  # a JSON schema given as is: nothing is injected into it
        if args is not None and shown.model_fields.keys() >= args.keys():
            return frozenset()
        full = tool.get_input_schema()
    except Exception:  # a schema LangChain cannot build: ToolNode's own error, when it runs
        return frozenset()
    if not hasattr(full, "model_fields"):
        return frozenset()
    return frozenset(full.model_fields.keys() - shown.model_fields.keys())


def _refused_call(request: ToolCallRequest) -> tuple[Call, tuple[str, ...]]:
    """The call to record the refusal of an undecidable tool call under (``_undecidable``), and
    the reasons to add: ``Call.tool`` of it when its name is a resource name; else ``tool:NAME``
    as asked (the Gate never decides it), cut to the longest resource name, with the full
    name's length and SHA-256 in a reason, so the entry fits the log. Its arguments are the
    model's (``_as_sent``)."""
    with contextlib.suppress(InputError):
        call = _tool_call_of(request)
        return Call(call.resource, call.action, _as_sent(request, call.args)), ()
    raw = request.tool_call.get("args") or {}
    return _named_call(
        _running_tool(request), _as_sent(request, dict(raw)) if isinstance(raw, Mapping) else {}
    )


def _named_call(name: object, args: Mapping[str, Any]) -> tuple[Call, tuple[str, ...]]:
    """``tool:NAME`` as asked, for a refusal the Gate never decides (``name`` need be no resource
    name), cut to the longest resource name, with the full name's length and SHA-256 in a reason
    to add, so the entry fits the log."""
    name = name if isinstance(name, str) else repr(name)
    resource = f"tool:{name}"
    if len(resource) <= MAX_NAME_LENGTH:
        return Call(resource, "invoke", args), ()
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return Call(resource[:MAX_NAME_LENGTH], "invoke", args), (
        f"the tool name has {len(name)} characters (sha256:{digest}); "
        f"the resource recorded is its first {MAX_NAME_LENGTH - len('tool:')}",
    )


INVALID_CALLS_NAMED = 32
"""How many of an answer's invalid tool calls the audit log names one entry each
(``_invalid_calls``); the next one's entry says how many more the answer held, none of which ran,
so a model answering thousands of them costs a bounded number of entries."""


def _invalid_calls(answer: AIMessage) -> list[tuple[Call, tuple[str, ...]]]:
    """The tool calls of ``answer`` that LangChain never routes to the tools: its
    ``invalid_tool_calls`` (arguments that are no JSON object: malformed, or cut at the output
    limit), each as the call to record the refusal of and the reasons; the first
    ``INVALID_CALLS_NAMED`` and one more, whose reason says exactly how many more the answer held
    (none of which ran), with the SHA-256 of their names and arguments. The reason gives the
    arguments' length and SHA-256, never their text: it is no mapping whose loggable arguments
    the audit log could keep and the others hide (a secret the model wrote in one would be
    written whole), nor is the parser's ``error``, which quotes them."""
    invalid = answer.invalid_tool_calls
    found = [_invalid_call(call) for call in invalid[: INVALID_CALLS_NAMED + 1]]
    if len(invalid) > len(found):
        rest = [[_invalid_name(call), _invalid_args(call)] for call in invalid[len(found) :]]
        digest = hashlib.sha256(json.dumps(rest).encode()).hexdigest()  # ASCII: lone surrogates too
        call, reasons = found[-1]
        found[-1] = (
            call,
            (
                f"{reasons[0]}; the answer held {len(invalid)} invalid tool calls; {len(rest)} more "
                f"after this one are not named (names and arguments: sha256:{digest}): none of them ran",
                *reasons[1:],
            ),
        )
    return found


def _invalid_name(invalid: Mapping[str, Any]) -> str:
    name = invalid.get("name")
    return name if isinstance(name, str) else repr(name)


def _invalid_args(invalid: Mapping[str, Any]) -> str:
    raw = invalid.get("args")
    return raw if isinstance(raw, str) else ""


def _invalid_call(invalid: Mapping[str, Any]) -> tuple[Call, tuple[str, ...]]:
    """The call and reasons of one of ``_invalid_calls``."""
    name = invalid.get("name")
    extra: tuple[str, ...] = ()
    try:
        call = Call.tool(_invalid_name(invalid))
    except InputError:
        call, extra = _named_call(name, {})
    text = _invalid_args(invalid)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    reason = (
        f"the model's call of tool {call.resource.removeprefix('tool:')} was not run: its arguments "
        f"({len(text)} characters, sha256:{digest}) are no JSON object, so LangChain never "
        "hands it to the tools (an invalid tool call)"
    )
    return call, (reason, *extra)


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


class _ValueRefused(InputError):
    """The refusal of a tool call, before it is decided, for a value the model wrote in its
    arguments (``_out_of_range``, ``_inexact_arguments``), whose text quotes that value and where
    it stands (the keys and indexes inside the argument): the model is told its own value.
    ``argument`` is the name of the argument that holds it (``None`` where unknown) and
    ``recorded`` the same text naming that argument alone, without the value nor the keys inside
    it, which the audit log records where the policy does not mark that argument loggable
    (``GateMiddleware._undecidable_reason``): until review R82 the ``deny`` entry quoted the
    value of any argument, and ``redact_reasons``, which replaces ``name=value``, left it; until
    review R84 it named the keys inside the argument's value (``'note''sk-live-...'``), which
    are part of that value."""

    def __init__(self, said: str, argument: object, recorded: str) -> None:
        super().__init__(said)
        self.argument = argument
        self.recorded = recorded


def _unusable_answer(request: ToolCallRequest, call_id: str) -> InputError | None:
    """Why ``request``'s call is not run, if so: the answer that asked for it ended before the
    model finished it (``_cut_answer``: at its output limit, stopped by a filter), or gives this
    call's id to more than one call (``_SHARED_ID``) (none of its calls is run then), or the
    call's arguments held what the run's checkpointer cannot store, so the answer kept has none
    (``_unstorable_arguments``), or as the model wrote them are no JSON object
    (``_unread_arguments``), or hold an integer out of range (``_out_of_range``) or a number no
    float holds as written (``_inexact_arguments``)."""
    answer = _asking_answer(request)
    if cut := _cut_answer(answer):
        return InputError(cut)
    if (count := _calls_sharing(answer, call_id)) > 1:
        return InputError(_SHARED_ID.format(call_id=call_id[:MAX_NAME_LENGTH], count=count))
    if (unstorable := _unstorable_arguments(answer, call_id)) is not None:
        return unstorable
    text = _written_arguments(answer, call_id)
    exact = _exact_arguments(text)
    if (unread := _unread_arguments(text, exact)) is not None:
        return unread
    if (refused := _out_of_range(request, answer, call_id)) is not None:
        return refused
    return _inexact_arguments(request, text, exact)


def _written_arguments(answer: AIMessage | None, call_id: str) -> str | None:
    """The text of the arguments of ``answer``'s call ``call_id`` as the model wrote them, where
    the answer keeps it (``_written_calls``); else ``None``."""
    return _arguments_text(_answer_calls(answer).written.get(call_id) if answer is not None else None)


def _arguments_text(function: object) -> str | None:
    """The text of the arguments of a call as the model wrote it (an entry of ``_written_calls``)."""
    text = function.get("arguments") if isinstance(function, Mapping) else None
    return text if isinstance(text, str) else None


def _exact_arguments(text: str | None) -> tuple[object] | None:
    """The arguments written as ``text`` (``_written_arguments``) as ``exact_float`` reads them,
    read once for both checks of them (``_unread_arguments``, ``_inexact_arguments``), in a
    1-tuple (they may be JSON ``null``). ``None`` where there is no text or this read fails: each
    check then reads the text on its own and words, or raises, what it meets, as before they
    shared one read (this read can fail earlier than a plain one: at a number ``exact_float``
    cannot read, an exponent ``Decimal`` cannot hold, or one frame deeper)."""
    if not text:
        return None
    try:
        return (json.loads(text, parse_float=exact_float, strict=False),)
    except Exception:  # read again by each check, which words or raises it as before
        return None


def _unread_arguments(text: str | None, exact: tuple[object] | None = None) -> InputError | None:
    """Why the call is refused when its arguments, as the model wrote them (``_written_arguments``),
    are not one JSON object and nothing else: text after the object, the object not closed, no
    JSON at all. LangChain reads a streamed call's text as *partial* JSON
    (``parse_partial_json``), which takes the first object and drops what follows it, and
    closes what is left open, so such text still became a call, one that the checks of the text
    as written (``_inexact_arguments``) could not read: ``500.00000000000000001`` followed by a
    stray ``x`` ran as ``500.0`` (until review R84). Refused before it is decided: what would run
    is not what the model wrote. Empty text is no arguments (a tool that takes none), as
    LangChain and ``DispatchedChatModel`` read it; control characters inside strings are read,
    as LangChain reads them (``strict=False``). Nothing of the text is quoted: the refusal is
    recorded, and any argument in it may be a secret."""
    if not text:
        return None
    try:
        value = exact[0] if exact is not None else json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        why = f"{exc.msg} at character {exc.pos}"
    except (ValueError, RecursionError):
        why = "it cannot be read"
    else:
        if isinstance(value, dict):
            return None
        why = "JSON, but no object"
    return InputError(_UNREAD_ARGUMENTS.format(why=why))


_UNREAD_ARGUMENTS = (
    "the tool call's arguments as the model wrote them are not one JSON object ({why}), so they "
    "cannot be read as written and the call is not run; write its arguments again, as one JSON "
    "object and nothing after it"
)
"""Why a call whose arguments as written are no JSON object is refused (``_unread_arguments``)."""


def _inexact_arguments(
    request: ToolCallRequest, text: str | None, exact: tuple[object] | None
) -> _ValueRefused | None:
    """Why the call is refused when its arguments, as the model wrote them, hold a number that no
    float holds as written (``100.00000000000000001``): the chat model read it as the nearest
    float (``100.0``), and a bound ``amount<=100`` would be decided on another value than the
    one the model gave (until review R54). The text is the call as the answer keeps it
    (``_written_calls``: the OpenAI form ``DispatchedChatModel`` keeps, the Responses API's
    content blocks, or the streamed text the model hook kept, ``_with_written_args``); an answer
    that keeps none (``ChatOpenAI`` on Chat Completions, not streamed) gets no such check. A call
    whose arguments were changed since they were read from it (another middleware's edit) is
    decided as it is. As the command line refuses such ``--args`` (``_json.inexact_argument``)."""
    args = request.tool_call.get("args")
    if text is None:
        found = None
    elif exact is None:
        found = inexact_argument(text, args)
    else:
        found = inexact_read(text, exact[0], args)
    if found is None:
        return None
    argument, path, number = found
    # Recorded by the argument's name alone: a key inside its value is part of the value. The
    # text is one JSON object here (``_unread_arguments`` refused any other), so a key holds it.
    return _ValueRefused(inexact_said(path, number), argument, inexact_said(repr(argument), None))


UNSTORABLE_KEY = "agentgate_unstorable"
"""The key of an answer's ``response_metadata`` that names, per tool call id, why its call is
refused: its arguments held what the run's checkpointer cannot store, so the answer kept for the
run's state holds none (``_storable_answer``)."""

LEFT_OUT_KEY = "agentgate_left_out"
"""The key of an answer's ``response_metadata`` that lists the parts of the answer, other than a
tool call's arguments, that the run's checkpointer cannot store and the answer kept leaves out
(``_storable_answer``): ``content[2]``, ``additional_kwargs['parsed']``, ``usage_metadata``."""

_UNSTORABLE_ARGUMENTS = (
    "the tool call's arguments hold what the run's checkpointer cannot store as it is (text that "
    "is no valid Unicode, such as a lone surrogate, or objects nested too deep), so they were not "
    "kept and the call is not run; write its arguments again, in plain text and with fewer levels"
)
"""Why a call whose arguments the run's checkpointer cannot store, or would give back changed
(text that is no valid Unicode, such as a lone surrogate, in a value), is refused
(``_unstorable_arguments``)."""

_UNSTORABLE_CALL = (
    "the tool call's id or tool name holds text the run's checkpointer cannot store as it is (no "
    "valid Unicode, such as a lone surrogate), so the call is not run; ask again with plain text"
)
"""Why a call whose id or tool name the run's checkpointer would give back changed is refused
(``_unstorable_left_out``): read back from a checkpoint, ``a\\ud800`` is ``a?``, a valid id,
which would be decided and run."""

_UNKEPT_AS_WRITTEN = (
    "the tool call as the model wrote it (the text of its arguments) could not be kept by the "
    "run's checkpointer, so it cannot be checked as written and the call is not run; ask again"
)
"""Why a call is refused when the answer kept for the run's state cannot give back the text of
its arguments as the model wrote it (``_kept_as_written``): without it the checks of the call as
written would be skipped, or made on other text."""

_UNSTORABLE_REASONS = (_UNSTORABLE_ARGUMENTS, _UNKEPT_AS_WRITTEN, _UNSTORABLE_CALL)
"""The reasons ``UNSTORABLE_KEY`` may name, which the tool hook tells the model
(``_unstorable_arguments``)."""

_LEFT_OUT_BLOCK = "agentgate: a part of this answer that the run's checkpointer cannot store was left out"
"""The text of the block that stands for an item of an answer's content list the run's
checkpointer cannot store (``_storable_answer``)."""


def _unstorable_arguments(answer: AIMessage | None, call_id: str) -> InputError | None:
    """Why the call is refused when the answer that asked for it says its arguments held what the
    run's checkpointer cannot store (``UNSTORABLE_KEY``: the model hook kept the call without
    them, ``_storable_answer``), or that it could not keep the call as written
    (``_UNKEPT_AS_WRITTEN``). The model is told one of ``_UNSTORABLE_REASONS``, never other text
    the answer keeps there (``_UNSTORABLE_ARGUMENTS`` then)."""
    noted = answer.response_metadata.get(UNSTORABLE_KEY) if answer is not None else None
    if isinstance(noted, Mapping) and call_id in noted:
        said = noted[call_id]
        return InputError(said if said in _UNSTORABLE_REASONS else _UNSTORABLE_ARGUMENTS)
    return None


def _no_such_tool(name: object) -> InputError:
    """Why a call of a tool the agent does not have is refused (``GateMiddleware._unknown_tool``).
    Recorded as a ``deny``: a model asking for a tool that is not there is evidence a reviewer
    wants (until review R52 LangChain's ToolNode answered it and the log had nothing)."""
    shown_name = name[:MAX_NAME_LENGTH] if isinstance(name, str) else repr(name)[:MAX_NAME_LENGTH]
    return InputError(f"the agent has no tool named {shown_name!r}; nothing ran")


INT_RANGE = 2**63
"""A tool call's integers lie within ``-(2**63) < v < 2**63``: the range of the policy's integer
values (a constraint's, ``capabilities._values``), within what LangGraph's checkpointers store
(msgpack: 64 bits). Until review R58 a model's call holding a larger one ended a checkpointed run
in LangGraph's ``TypeError: Type is not msgpack serializable: AIMessage``, and without a
checkpointer it was decided (allowed where no constraint bounds the argument)."""

OUT_OF_RANGE_KEY = "agentgate_out_of_range"
"""The key of an answer's ``response_metadata`` that names, per tool call id, why its call is
refused: its arguments held an integer out of range, which the answer kept for the run's state
holds as text (``_storable_answer``)."""

OUT_OF_RANGE_AT_KEY = "agentgate_out_of_range_at"
"""The key of an answer's ``response_metadata`` that lists, per tool call id, where in its
arguments the answer kept an integer out of range as text (the keys and indexes that lead to
each), so that the refusal is recorded with the arguments as the model sent them (``_as_sent``)."""


def _integers_out_of_range(value: object) -> list[tuple[tuple[object, ...], int]]:
    """Each integer (not a boolean) of ``value`` out of range (``INT_RANGE``), with the keys and
    indexes that lead to it inside the objects and lists; walked without recursion, as the
    parser nests. Every model answer and tool result is looked at, so ``_holds_out_of_range``
    answers first whether there is any (the usual answer: none) without building the paths.

    Each object and list is walked once, at the first place it is met (``_walked_once``): one
    that holds itself (a tree with parent links in a tool's artifact, a hand-made answer's
    arguments) has endless paths, and until review R88 the walk never ended. An integer in an
    object or list met at more than one place is named at the first; a copy that turns the
    named ones to text (``_with_text_for``) then still holds it at the others, so a tool's
    result holding it is not kept (``_holds_beyond_range``)."""
    found: list[tuple[tuple[object, ...], int]] = []
    if not _holds_out_of_range(value):
        return found
    stack: list[tuple[object, tuple[object, ...]]] = [(value, ())]
    seen: dict[int, object] = {}
    while stack:
        item, keys = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if not -INT_RANGE < item < INT_RANGE:
                found.append((keys, item))
        elif not _walked_once(item, seen):
            continue
        elif isinstance(item, Mapping):
            stack.extend((v, (*keys, k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, list | tuple):
            stack.extend((v, (*keys, i)) for i, v in reversed(list(enumerate(item))))
    return found


def _holds_out_of_range(value: object) -> bool:
    """Whether ``value`` holds an integer (not a boolean) out of range (``INT_RANGE``) inside its
    objects and lists: ``_integers_out_of_range`` without the paths; walked without recursion,
    each object and list once (``_walked_once``: one may hold itself)."""
    stack = [value]
    seen: dict[int, object] = {}
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            continue
        if isinstance(item, int):
            if not -INT_RANGE < item < INT_RANGE and not isinstance(item, bool):
                return True
        elif not _walked_once(item, seen):
            continue
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _walked_once(item: object, seen: dict[int, object]) -> bool:
    """Whether a walk of objects and lists is to go into ``item``: a mapping, list or tuple whose
    id is not in ``seen`` yet (kept in it now, by its id). A walk that went into each every time it
    met it would never end on one that holds itself, and would take exponential time on one that
    holds the same list twice at each of many levels. ``seen`` keeps each object walked alive
    until the walk ends: an id is unique only among live objects, and a mapping that makes its
    values on each read (a lazy view) hands dicts that are freed once walked, so that until
    review R88b the next one could take a walked one's id and be passed over, with an integer
    beyond 64 bits in it."""
    if not isinstance(item, Mapping | list | tuple) or id(item) in seen:
        return False
    seen[id(item)] = item
    return True


def _integer_text(value: int) -> str:
    """``value`` in decimal, or its size where Python will not print it (past 4,300 digits)."""
    try:
        return str(int(value))
    except ValueError:
        return f"an integer of {value.bit_length()} bits"


def _out_of_range_said(keys: Sequence[object], value: int | None) -> str:
    """Why a call whose argument at ``keys`` is the integer ``value`` (out of range) is refused;
    with ``None``, the same without the value, as the audit log records it for an argument the
    policy does not mark loggable (``_ValueRefused``, given the argument's name alone)."""
    path = "".join(f"[{k}]" if isinstance(k, int) else repr(k) for k in keys)
    where = f"argument {path} is" if path else "an argument is"
    if value is not None:
        text = _integer_text(value)
        shown = text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"
        where = f"{where} {shown},"
    return (
        f"{where} an integer beyond the range a call's arguments may hold "
        "(-2**63 < v < 2**63); the call is not run; give it with fewer digits, or as text"
    )


def _out_of_range(request: ToolCallRequest, answer: AIMessage | None, call_id: str) -> _ValueRefused | None:
    """Why the call is refused when its arguments, as the model wrote them, hold an integer out of
    range (``INT_RANGE``): as the answer that asked for it says (``OUT_OF_RANGE_KEY``: the model
    hook kept that integer as text, ``_storable_answer``), or as the call's arguments show it (an
    answer that did not pass through the model hook), less the arguments LangGraph injects
    (``_model_args``): the call decided has none of them, and a value a middleware outside the
    gate put there (an account number, a key) is one the model must not be shown (until review
    R60 such a value out of range refused the call, and the refusal quoted it to the model)."""
    if answer is not None:
        noted = answer.response_metadata.get(OUT_OF_RANGE_KEY)
        if isinstance(noted, Mapping) and isinstance(said := noted.get(call_id), str):
            # Where the model hook kept the integer (``_storable_answer``): the recorded text names
            # the argument without its value.
            paths = _kept_as_text(answer, call_id)
            kept = paths[0] if paths and isinstance(paths[0], list) else []
            return _ValueRefused(said, kept[0] if kept else None, _out_of_range_said(kept[:1], None))
    found = _integers_out_of_range(_model_args(request))
    if not found:
        return None
    keys, value = found[0]
    return _ValueRefused(
        _out_of_range_said(keys, value), keys[0] if keys else None, _out_of_range_said(keys[:1], None)
    )


def _storable_answer(message: AIMessage, serde: SerializerProtocol | None) -> AIMessage:
    """``message`` as the run's state can keep it, where it holds an integer out of range
    (``INT_RANGE``), or anything else ``serde`` (the run's checkpointer's serializer,
    ``_run_serde``; ``None`` without a checkpointer: nothing is stored) cannot write
    (``_unstorable_left_out``): a copy in which

    - a tool call's arguments hold each such integer as its decimal text, and
      ``response_metadata`` names why the call is refused (``OUT_OF_RANGE_KEY``), which the tool
      hook reads (``_out_of_range``), and where the text stands (``OUT_OF_RANGE_AT_KEY``), which
      it reads to record the refusal (``_as_sent``); the other calls are kept as they are;
    - ``additional_kwargs``, ``response_metadata`` and a content list hold each such integer as
      its decimal text (a provider's raw usage, ``response_metadata["token_usage"]``);
    - ``usage_metadata`` holding one is left out: LangChain keeps no text there, and the call was
      charged already (``Gate.run``'s ``spent`` reads the answer first: a count over
      ``MAX_USAGE_TOKENS`` is charged as reserved, its outcome saying what was reported).

    ``message`` itself when it holds none (the usual case). Until review R59 a model reporting
    such a usage (10**30 input tokens) ended a checkpointed run in LangGraph's ``TypeError``.
    With ``serde``, the answer is serialized once more to find out whether it can be written,
    and its tool calls, with the text of their arguments as the model wrote it, written and read
    back to find out whether they come back the same (``_calls_read_back``)."""
    update: dict[str, Any] = {}
    said: dict[str, str] = {}
    at: dict[str, list[list[object]]] = {}
    calls: list[Any] = []
    for call in message.tool_calls:
        found = _integers_out_of_range(call.get("args"))
        if found:
            said[str(call.get("id"))] = _out_of_range_said(*found[0])
            at[str(call.get("id"))] = [list(keys) for keys, _ in found]
            calls.append({**call, "args": _with_text_for(call.get("args"), found)})
        else:
            calls.append(call)
    if said:
        update["tool_calls"] = calls
        metadata = {**message.response_metadata, OUT_OF_RANGE_KEY: said, OUT_OF_RANGE_AT_KEY: at}
        update["response_metadata"] = metadata
    for field in ("additional_kwargs", "response_metadata", "content"):
        value = update.get(field, getattr(message, field))
        if not isinstance(value, str) and (found := _integers_out_of_range(value)):
            update[field] = _with_text_for(value, found)
    if message.usage_metadata is not None and _integers_out_of_range(message.usage_metadata):
        update["usage_metadata"] = None
    kept = message.model_copy(update=update) if update else message
    if serde is None or (_stores(serde, kept) and _calls_read_back(serde, kept)):
        return kept
    return _unstorable_left_out(kept, serde)


def _unstorable_left_out(message: AIMessage, serde: SerializerProtocol) -> AIMessage:
    """``message``, which ``serde`` (the run's checkpointer's serializer) cannot write, or not so
    that its tool calls come back the same (``_calls_read_back``), as it can: a copy in which

    - each tool call whose arguments it cannot write, or would give back changed, has none
      (``{}``), and ``response_metadata`` names why the call is refused (``UNSTORABLE_KEY``),
      which the tool hook reads (``_unstorable_arguments``); so does one whose id or tool name
      it would give back changed (``_UNSTORABLE_CALL``), and one whose text of its arguments as
      the model wrote it (``_written_calls``) it would (``_UNKEPT_AS_WRITTEN``); the other calls
      are kept as they are. A model writes its arguments as JSON, which ``json.loads`` reads
      into what msgpack cannot write: a key holding a lone surrogate (from the escape
      ``"\\ud800"``), objects nested past msgpack's limit (``json.loads`` reads about 1,000
      levels); and into what it writes changed: LangGraph's msgpack writes a lone surrogate in a
      value as ``?``, so that a call read back from a checkpoint would run on other arguments
      than those the model wrote, or escape a check of its text as written (until review R90b
      ``{"amount": 100.00000000000000001, "memo": "\\ud800"}`` ran as ``100.0`` under
      ``amount<=100`` once reloaded, and the id ``a\\ud800``, refused by the gate, ran as
      ``a?``);
    - each item of a content list (a tool call block holding the same arguments), and each entry
      of ``additional_kwargs`` and ``response_metadata``, that it cannot write is left out (an
      item of content replaced by a text block saying so, ``_LEFT_OUT_BLOCK``), and so is a
      ``usage_metadata`` it cannot write; ``response_metadata`` lists what was left out
      (``LEFT_OUT_KEY``);
    - agentgate's notes keyed by call id (``_BY_CALL_ID``) lose only the entries it cannot
      write (``_storable_by_id``): a call whose id holds a lone surrogate is refused by its id
      (``Gate.authorize``: ``call_id must be valid Unicode text``), the calls beside it as their
      own notes say;
    - the text of each call's arguments as the model wrote it (``_written_calls``) that a part
      left out held (a raw call in ``additional_kwargs["tool_calls"]`` beside a vendor field it
      cannot write, a ``function_call`` content block) is kept under ``WRITTEN_ARGS_KEY``
      (``_kept_as_written``), so that a number no float holds as written is still refused
      (``_inexact_arguments``; until review R90 one such part dropped the text of every call of
      the answer, and ``100.00000000000000001`` ran as ``100.0`` under ``amount<=100``); a call
      whose text cannot be read back as it was even so is refused (``_UNKEPT_AS_WRITTEN``).

    Each part is tried alone, in an answer that holds nothing else, at the depth it has in the
    answer. Until review R89 only integers beyond 64 bits were made storable, and such an answer
    ended a checkpointed run in LangGraph's ``TypeError: Type is not msgpack serializable:
    AIMessage``; the call's ``deny`` was recorded and the model never told why. Raises
    ``InputError`` when the copy still cannot be written (a field of an ``AIMessage`` subclass)."""
    update: dict[str, Any] = {}
    refused: dict[str, str] = {}
    calls: list[Any] = []
    written = _written_calls(message)
    for call in message.tool_calls:
        if not _stores_in_answer(serde, tool_calls=[call]) or not _reads_back(serde, call.get("args")):
            refused[str(call.get("id"))] = _UNSTORABLE_ARGUMENTS
            calls.append({**call, "args": {}})
            continue
        if not _reads_back(serde, {k: v for k, v in call.items() if k != "args"}):  # read back above
            refused[str(call.get("id"))] = _UNSTORABLE_CALL
        elif not _reads_back(serde, _arguments_text(written.get(str(call.get("id"))))):
            refused[str(call.get("id"))] = _UNKEPT_AS_WRITTEN
        calls.append(call)
    if refused:
        update["tool_calls"] = calls
    left_out: list[str] = []
    if isinstance(message.content, list):
        blocks = [(block, _stores_in_answer(serde, content=[block])) for block in message.content]
        if not all(stores for _, stores in blocks):
            update["content"] = [
                b if stores else {"type": "text", "text": _LEFT_OUT_BLOCK} for b, stores in blocks
            ]
            left_out.extend(f"content[{i}]" for i, (_, stores) in enumerate(blocks) if not stores)
    for field in ("additional_kwargs", "response_metadata"):
        entries = getattr(message, field)
        kept: dict[str, Any] = {}
        for key, value in entries.items():
            if field == "response_metadata" and key in _BY_CALL_ID and isinstance(value, Mapping):
                kept[key] = _storable_by_id(serde, key, value)  # agentgate's own: by entry
            elif _stores_in_answer(serde, **{field: {key: value}}):
                kept[key] = value
            else:
                left_out.append(f"{field}[{quoted(key, 40)}]")
        if len(kept) < len(entries) or any(kept[k] is not entries[k] for k in kept):
            update[field] = kept
    if message.usage_metadata is not None and not _stores_in_answer(
        serde, usage_metadata=message.usage_metadata
    ):
        update["usage_metadata"] = None
        left_out.append("usage_metadata")
    metadata = dict(update.get("response_metadata", message.response_metadata))
    if left_out:
        metadata[LEFT_OUT_KEY] = left_out
    kept_answer, unkept = _kept_as_written(
        message, message.model_copy(update={**update, "response_metadata": metadata}), serde
    )
    refused.update((call_id, _UNKEPT_AS_WRITTEN) for call_id in unkept if call_id not in refused)
    if refused:
        noted = {
            **kept_answer.response_metadata,
            UNSTORABLE_KEY: _storable_by_id(serde, UNSTORABLE_KEY, refused),
        }
        kept_answer = kept_answer.model_copy(update={"response_metadata": noted})
    if not _stores(serde, kept_answer):
        raise InputError(
            f"the model's answer (a {type(message).__name__}) holds what the run's checkpointer cannot "
            "store outside its tool calls, content, additional_kwargs, response_metadata and "
            "usage_metadata, so the run cannot keep it"
        )
    return kept_answer


def _kept_as_written(
    message: AIMessage, kept: AIMessage, serde: SerializerProtocol
) -> tuple[AIMessage, list[str]]:
    """``kept`` (``message`` less what ``serde`` cannot write) keeping under ``WRITTEN_ARGS_KEY``
    the text of each tool call's arguments as the model wrote it that ``message`` holds
    (``_written_calls``) and ``kept`` no longer reads the same; and the ids of the calls to refuse
    (``_UNKEPT_AS_WRITTEN``): those whose text ``kept`` still reads otherwise (another copy of
    the call as written, kept, read first; text ``serde`` cannot write). A call whose id
    ``serde`` cannot write as a key is none of them: it can be noted nowhere, and is refused by
    its id (``Gate.authorize``: ``call_id must be valid Unicode text``)."""
    ids = [call_id for call in message.tool_calls if isinstance(call_id := call.get("id"), str)]
    before, after = _written_calls(message), _written_calls(kept)
    lost = {
        call_id: text
        for call_id in ids
        if (text := _arguments_text(before.get(call_id))) is not None
        and _arguments_text(after.get(call_id)) != text
    }
    if lost:
        held = kept.response_metadata.get(WRITTEN_ARGS_KEY)
        texts = _storable_by_id(
            serde, WRITTEN_ARGS_KEY, {**(held if isinstance(held, Mapping) else {}), **lost}
        )
        kept = kept.model_copy(
            update={"response_metadata": {**kept.response_metadata, WRITTEN_ARGS_KEY: texts}}
        )
        after = _written_calls(kept)
    unkept = [
        call_id
        for call_id, text in lost.items()
        if _arguments_text(after.get(call_id)) != text and _keyable(serde, call_id)
    ]
    return kept, unkept


_BY_CALL_ID = (WRITTEN_ARGS_KEY, OUT_OF_RANGE_KEY, OUT_OF_RANGE_AT_KEY, UNSTORABLE_KEY)
"""The entries of an answer's ``response_metadata`` that agentgate writes, each a mapping keyed
by tool call id (``_storable_by_id``)."""


def _storable_by_id(serde: SerializerProtocol, key: str, noted: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """``noted`` (``response_metadata[key]``, one of agentgate's notes keyed by tool call id,
    ``_BY_CALL_ID``) as ``serde`` can write it: each entry it cannot write under its call id is
    kept under that id as ``serde`` writes it as a value, where that differs (LangGraph's msgpack
    writes a lone surrogate in a value as ``?``, and cannot write it in a key: the call's id in
    the answer read back from a checkpoint is ``'c?'``), else left out. An entry of that id's own
    is kept over one moved under it; a call whose id it is (``'c?'`` beside ``'c\\ud800'``)
    reads one moved, as it shares its id with the other once read back (``_SHARED_ID``). Until
    review R90 a call id holding a lone surrogate made the whole note unstorable, and it was left
    out for every call of the answer (an integer beyond 64 bits of a call beside it, kept as
    text, was then decided as that text), or ended the run. ``noted`` itself where ``serde``
    writes it whole (the usual case)."""
    if _stores_in_answer(serde, response_metadata={key: noted}):
        return noted
    kept: dict[Any, Any] = {}
    moved: dict[Any, Any] = {}
    for call_id, value in noted.items():
        if _stores_in_answer(serde, response_metadata={key: {call_id: value}}):
            kept[call_id] = value
        elif (
            (stored := _as_stored(serde, call_id)) is not None
            and stored not in noted
            and _stores_in_answer(serde, response_metadata={key: {stored: value}})
        ):
            moved.setdefault(stored, value)
    return {**moved, **kept}


def _as_stored(serde: SerializerProtocol, call_id: object) -> str | None:
    """``call_id`` as ``serde`` reads it back once written; ``None`` where that is the same, no
    text, or it cannot be written."""
    stored = _read_back(serde, call_id)
    return stored if isinstance(stored, str) and stored != call_id else None


def _keyable(serde: SerializerProtocol, call_id: str) -> bool:
    """Whether ``serde`` can write ``call_id`` as a key of agentgate's notes (``_BY_CALL_ID``)."""
    return _stores_in_answer(serde, response_metadata={UNSTORABLE_KEY: {call_id: _UNKEPT_AS_WRITTEN}})


def _calls_read_back(serde: SerializerProtocol, message: AIMessage) -> bool:
    """Whether ``serde`` gives back each tool call of ``message`` (its id, tool name and
    arguments) and the text of its arguments as the model wrote it (``_written_calls``) the same
    once written (``_reads_back``). ``True`` for an answer without tool calls (the usual case)."""
    if not message.tool_calls:
        return True
    # Read as the tool hook reads them (``_answer_calls``, kept per answer): not read again there.
    texts = {call_id: _arguments_text(call) for call_id, call in _answer_calls(message).written.items()}
    return _reads_back(serde, [message.tool_calls, texts])


def _reads_back(serde: SerializerProtocol, value: object) -> bool:
    """Whether ``serde`` writes ``value`` and reads it back the same: LangGraph's msgpack writes
    a lone surrogate in text as ``?``, where it does not refuse it (in a key). Read back as the
    same JSON (a NaN, which equals nothing; a tuple, read back as a list) counts as the same."""
    back = _read_back(serde, value)
    if back is _UNWRITABLE:
        return False
    if back == value:
        return True
    try:  # ``ensure_ascii``: a lone surrogate is its escape, not the ``?`` it was read back as
        return json.dumps(back) == json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False


_UNWRITABLE = object()
"""What ``_read_back`` gives for a value ``serde`` refuses."""


def _read_back(serde: SerializerProtocol, value: object) -> object:
    """``value`` as ``serde`` reads it back once written; ``_UNWRITABLE`` where it refuses it."""
    try:
        return serde.loads_typed(serde.dumps_typed(value))
    except Exception:  # any serializer's refusal: msgpack's TypeError, an encrypting one's own
        return _UNWRITABLE


def _stores_in_answer(serde: SerializerProtocol, **fields: Any) -> bool:
    """Whether ``serde`` can write an answer holding ``fields`` and nothing else: a part of an
    answer, tried at the depth it has in one (msgpack's limit counts the levels above it)."""
    return _stores(serde, AIMessage.model_construct(**{"content": "", **fields}))


def _with_written_args(message: AIMessage, written: Mapping[str, str]) -> AIMessage:
    """``message`` keeping, under ``WRITTEN_ARGS_KEY``, the text ``written`` (by call id: the
    fragments the model hook watched stream, ``_Streamed.written``) of each of its tool calls for
    which it keeps none of its own (``_written_calls``), so that the tool hook reads the numbers
    no float holds as written (``_inexact_arguments``); ``message`` itself when there is none to
    keep (the usual case: no tool calls, a model that keeps the text, or one that did not stream)."""
    if not written or not message.tool_calls:
        return message
    own = _written_calls(message)  # not ``_answer_calls``: this answer is about to be replaced
    kept = {
        call_id: written[call_id]
        for call in message.tool_calls
        if isinstance(call_id := call.get("id"), str) and call_id in written and call_id not in own
    }
    if not kept:
        return message
    return message.model_copy(
        update={"response_metadata": {**message.response_metadata, WRITTEN_ARGS_KEY: kept}}
    )


def _as_sent(request: ToolCallRequest, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """``args`` (``request``'s call's arguments as the run's state holds them) with each integer
    out of range that the model hook kept as text (``OUT_OF_RANGE_AT_KEY``) back as the integer
    the model sent: the refusal's ``args_digest`` and logged arguments are then over the call as
    the model made it, which an auditor can match with the model's answer, and the same as a
    ``gated_tool_node`` records for the same call (until review R59 they were over the text, the
    digest of another call: one whose model sent that number as a string). ``args`` itself when
    nothing was kept so (the usual case)."""
    paths = _kept_as_text(_asking_answer(request), request.tool_call.get("id"))
    if paths is None:
        return args
    places: list[tuple[tuple[object, ...], object]] = []
    for keys in paths:
        text = _at(args, keys) if isinstance(keys, list) and keys else None
        if isinstance(text, str) and text.isascii() and text.lstrip("-").isdigit():
            with contextlib.suppress(ValueError):  # past Python's 4,300 digits: left as text
                if not -INT_RANGE < (value := int(text)) < INT_RANGE:
                    places.append((tuple(keys), value))
    return cast(Mapping[str, Any], _with_values_at(args, places)) if places else args


def _kept_as_text(answer: AIMessage | None, call_id: object) -> list[Any] | None:
    """Where ``answer`` notes (``OUT_OF_RANGE_AT_KEY``) that the model hook kept integers out of
    range of its call ``call_id`` as text: a list of key paths, unchecked; ``None`` without one."""
    noted = answer.response_metadata.get(OUT_OF_RANGE_AT_KEY) if answer is not None else None
    paths = noted.get(call_id) if isinstance(noted, Mapping) else None
    return paths if isinstance(paths, list) else None


def _at(item: object, keys: list[object]) -> object:
    """What ``item`` holds at the keys and indexes ``keys``; ``None`` where there is nothing."""
    for key in keys:
        if isinstance(item, Mapping):
            if key not in item:
                return None
            item = item[key]
        elif isinstance(item, list) and isinstance(key, int) and 0 <= key < len(item):
            item = item[key]
        else:
            return None
    return item


def _storable_result(result: R, call_id: str, name: str, serde: SerializerProtocol | None = None) -> R:
    """``result`` (what a tool answered: a ``ToolMessage``, a ``Command`` whose update holds
    messages, or a list of them) as the run's state can keep it: each ``ToolMessage`` whose
    ``content`` or ``artifact`` holds an integer out of range (``INT_RANGE``) in its dicts and
    lists copied with each such integer as its decimal text. ``result`` itself when none does (the
    usual case). Until review R59 a ``content_and_artifact`` tool whose artifact held one (a
    big-integer id, an amount in a currency's smallest unit) ran, was recorded as run, and then
    ended a checkpointed run in LangGraph's ``TypeError: Type is not msgpack serializable:
    ToolMessage``: the model never saw the result, and the run could not be resumed.

    An integer out of range that is no item of a dict or list (a field of an ``artifact`` that is
    an object, a pydantic model or a dataclass; a ``Command``'s update key other than
    ``messages``) is not turned to text: that would change the type of the tool's own object or
    of the graph's state. Such a result is not kept: the call's answer is an error
    ``ToolMessage`` (``_unkept``) telling the model that the tool ran and its result could not be
    kept, and the call's outcome is ``error`` (``_failed``). Until review R60 the call was
    recorded ``ok`` and LangGraph's checkpointer then ended the run in its ``TypeError``.

    So is a result that ``serde`` (the run's checkpointer's serializer, ``_checkpoint_serde``;
    ``None`` without a checkpointer: nothing is stored) cannot write: an object of the tool's own
    class, a lock, a function, anywhere in it. A result other than text alone (``_plain_text``)
    is serialized once more to find out. Until review R66 such a call was recorded ``ok``, and
    the checkpointed run then ended in the same ``TypeError``."""
    kept = _with_integer_text(result)
    if _holds_beyond_range(kept):
        return cast(R, _unkept(call_id, name, _BEYOND_RANGE))
    if serde is not None and not _plain_text(kept) and not _stores(serde, kept):
        return cast(R, _unkept(call_id, name, _UNSTORABLE))
    return kept


def _plain_text(result: object) -> bool:
    """Whether ``result`` is a ``ToolMessage`` of text alone (no artifact, no metadata): what a
    tool answering text makes, which any checkpointer stores (``_storable_result`` does not
    serialize it to find out)."""
    return (
        isinstance(result, ToolMessage)
        and isinstance(result.content, str)
        and result.artifact is None
        and not result.additional_kwargs
        and not result.response_metadata
    )


def _stores(serde: SerializerProtocol, result: object) -> bool:
    """Whether ``serde`` (the run's checkpointer's serializer) can write ``result``, as the
    checkpointer writes the tools node's output when the step ends."""
    try:
        serde.dumps_typed(result)
    except Exception:  # any serializer's refusal: msgpack's TypeError, an encrypting one's own
        return False
    return True


def _with_integer_text(result: R) -> R:
    """``_storable_result`` of the integers in a result's dicts and lists: their decimal text, in
    the ``content`` and ``artifact`` of each ``ToolMessage``, and of each message dict that reads as
    one (``_read_message``), among the messages of a ``Command``'s update as ``ToolNode`` reads
    them (``_update_messages``: a mapping update's ``messages``, or a list update itself) where
    they are a list. Until review R86 a list update was not read, so its messages' integers were
    left, and the whole result was not kept (``_BEYOND_RANGE``) where its mapping form was."""
    if isinstance(result, ToolMessage):
        update = _fields_as_text(result.content, result.artifact)
        return cast(R, result.model_copy(update=update)) if update else result
    if isinstance(result, Mapping):
        update = _fields_as_text(result.get("content"), result.get("artifact"))
        # LangChain's reading of the dict, only for the rare one holding such an integer
        if update and isinstance(_read_message(result), ToolMessage):
            return cast(R, {**result, **update})
        return result
    if isinstance(result, list):
        items = [_with_integer_text(item) for item in result]
        same = all(new is old for new, old in zip(items, result, strict=True))
        return result if same else cast(R, items)
    if isinstance(result, Command):
        messages = _update_messages(result)
        if isinstance(messages, list) and (kept := _with_integer_text(messages)) is not messages:
            written = {**result.update, "messages": kept} if isinstance(result.update, Mapping) else kept
            return cast(R, dataclasses.replace(result, update=written))
    return result


def _fields_as_text(content: object, artifact: object) -> dict[str, object]:
    """Of a tool message's ``content`` and ``artifact``, each that holds an integer out of range in
    its dicts and lists, by its field's name: a copy with each such integer as its decimal text."""
    update: dict[str, object] = {}
    for field, value in (("content", content), ("artifact", artifact)):
        if not isinstance(value, str) and (found := _integers_out_of_range(value)):
            update[field] = _with_text_for(value, found)
    return update


def _holds_beyond_range(value: object) -> bool:
    """Whether ``value`` holds an integer (not a boolean) out of range (``INT_RANGE``) anywhere
    LangGraph's serializer looks: in dicts, lists, tuples and sets, and in the fields of pydantic
    models (a ``ToolMessage`` too) and dataclasses (a ``Command`` too). Walked without recursion,
    each object once (an object graph may hold a cycle)."""
    stack = [value]
    seen: dict[int, object] = {}
    while stack:
        item = stack.pop()
        if isinstance(item, str | bytes | float | None):
            continue
        if isinstance(item, int):
            if not -INT_RANGE < item < INT_RANGE and not isinstance(item, bool):
                return True
            continue
        if id(item) in seen:
            continue
        seen[id(item)] = item  # kept alive, so that its id stays its own (``_walked_once``)
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif isinstance(item, BaseModel):
            stack.extend(vars(item).values())
            stack.extend((item.__pydantic_extra__ or {}).values())
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, field.name) for field in dataclasses.fields(item))
    return False


_BEYOND_RANGE = "an integer beyond 64 bits in an object or a state update, which the run's state cannot keep"
"""What a result ``_storable_result`` does not keep holds: an integer it cannot turn to text."""

_UNSTORABLE = "an object the run's checkpointer cannot store"
"""What a result ``_storable_result`` does not keep holds: a value its serializer refuses."""


def _unkept(call_id: str, name: str, holds: str) -> ToolMessage:
    """The answer to a call whose result the run's state cannot keep (``_storable_result``), as
    it ``holds`` (``_BEYOND_RANGE``, ``_UNSTORABLE``)."""
    return ToolMessage(
        content=(
            f"agentgate: tool {name} ran, but its result holds {holds}: the result is not kept, and "
            "the call is recorded as failed. It ran: do not assume that it did not."
        ),
        tool_call_id=call_id,
        name=name,
        status="error",
    )


def _with_text_for(args: object, found: list[tuple[tuple[object, ...], int]]) -> object:
    """A copy of ``args`` whose integers at the places ``found`` names are their decimal text."""
    return _with_values_at(args, [(keys, _integer_text(value)) for keys, value in found])


def _with_values_at(args: object, places: list[tuple[tuple[object, ...], object]]) -> object:
    """A copy of ``args`` holding, at each place ``places`` names (the keys and indexes that
    lead to it), the value given with it: each dict and list on the way to one copied (without
    recursion), the rest shared."""
    copy = _copied_container(args)
    for keys, value in places:
        if not keys:  # the arguments are the value itself
            return value
        place: Any = copy
        for key in keys[:-1]:
            inner = _copied_container(place[key])
            place[key] = inner
            place = inner
        place[keys[-1]] = value
    return copy


def _copied_container(item: object) -> object:
    """A shallow copy of a dict or list (a tuple as a list), else ``item``. A container copied
    already on the way to another integer is copied again: correct, and such calls are rare."""
    if isinstance(item, Mapping):
        return dict(item)
    if isinstance(item, list | tuple):
        return list(cast(list[object], item))
    return item
