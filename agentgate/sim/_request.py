"""The simulated backend's reading of an OpenAI chat-completions request body.

Everything a client sends is checked here, before the engine sees it, so that a malformed or
hostile body is an ``InputError`` (HTTP 400) and never a 500 or unbounded work: the body must be
strict JSON (no ``NaN``/``Infinity``, nesting within the parser's depth), a JSON object whose
``messages`` are a non-empty list of objects with a string ``role`` and a ``content`` that is a
string, null or a list of objects (a ``text`` part's ``text`` a string, as vLLM requires), holding at most
``MAX_PROMPT_ITEMS`` messages and content parts in all; ``max_tokens`` (or
``max_completion_tokens``) an integer from 1 to the context limit, defaulting to 16; ``stream`` a
boolean and ``stream_options`` an object, and only with ``stream`` true (unless empty), as vLLM
refuses it otherwise; ``n`` and ``best_of`` absent, null or 1 (one choice per
request: the engine models one sequence per request, so a request for several is refused rather
than answered with one, and usage for one). Like vLLM, a request whose prompt plus ``max_tokens``
exceeds the context limit (``max_model_len``) is refused rather than queued.

The sampling fields the engine does not model are checked as vLLM checks them, so that a request
the simulator serves is one vLLM serves: ``seed`` a 64-bit integer, ``top_k`` an integer of at
least -1, ``logprobs`` a boolean, ``top_logprobs`` an integer from 0 to 20 (vLLM's default
``--max-logprobs``) and above 0 only with ``logprobs`` true. Every integer field (those, ``n``,
``best_of``, ``max_tokens``, ``max_completion_tokens``) takes a number with no fractional part as
the integer it is (``5.0`` is 5), as vLLM's pydantic in lax mode does; until review R61 ``n: 1.0``
and ``max_tokens: 5.0`` were refused. Unlike vLLM's lax mode, text (``"5"``) and booleans are
refused where an integer is meant, as JSON types are everywhere else here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    with_config,
)
from pydantic_core import ErrorDetails
from typing_extensions import TypedDict  # pydantic takes typing's only from Python 3.12

from agentgate._json import INT64, integral
from agentgate.dispatch.prefix import estimate_prompt_tokens, prompt_text
from agentgate.errors import InputError

DEFAULT_MAX_TOKENS = 16
"""Tokens generated when a request names no ``max_tokens`` (OpenAI's legacy default)."""
_ONE_CHOICE = ("n", "best_of")
"""Fields that ask for several sequences (vLLM honours both): absent, null or 1 here."""
MAX_LOGPROBS = 20
"""The most ``top_logprobs`` a request may ask for: vLLM's default ``--max-logprobs``."""
MAX_PROMPT_ITEMS = 100_000
"""The most messages and content parts, counted together, a request may hold: the simulator's
own bound (vLLM and OpenAI have none), far above a real conversation's. Each item is walked
several times before the context limit can be checked (validated, rendered as text, counted), on
the server's event loop: until review R83 a 16 MiB body of 5.6 million empty parts (``{}``) took
seconds there, stalling every other request and ``/health``, before it was refused."""
Integral = Annotated[int, BeforeValidator(integral)]
"""An integer field: an ``int`` (never a ``bool``, never text) or a float with no fraction."""


@with_config(ConfigDict(strict=True, extra="allow"))
class _TextPart(TypedDict):
    """A content part of type ``text``: its ``text`` a string, as vLLM's typed parts require
    (until review R96 ``{"type": "text", "text": 5}`` was served). A TypedDict, not a model: it
    is checked, never kept, and a body of 100,000 parts built as models took 12 times the
    validation's CPU (the R96 regression review)."""

    type: Literal["text"]
    text: str


_TEXT_PART = "<text part>"
_OTHER_PART = "<other part>"
_TEXT = "<text>"
_PARTS = "<parts>"
_NULL = "<null>"
_TAGS = frozenset({_TEXT_PART, _OTHER_PART, _TEXT, _PARTS, _NULL})
"""The branches of the tagged unions below, which pydantic puts in an error's ``loc``: never a
field's name, so ``_refusal`` leaves them out of the field it names."""


def _part_kind(part: object) -> str:
    return _TEXT_PART if isinstance(part, dict) and part.get("type") == "text" else _OTHER_PART


_CONTENT_KINDS: dict[type, str] = {str: _TEXT, list: _PARTS, type(None): _NULL}


def _content_kind(content: object) -> str | None:
    return _CONTENT_KINDS.get(type(content))


_Part = Annotated[
    Annotated[_TextPart, Tag(_TEXT_PART)] | Annotated[dict[str, Any], Tag(_OTHER_PART)],
    Discriminator(_part_kind),
]
"""A content part: a JSON object, checked further where it is a text part (other parts, images
and the rest, are taken as they are)."""
_Content = Annotated[
    Annotated[str, Tag(_TEXT)] | Annotated[list[_Part], Tag(_PARTS)] | Annotated[None, Tag(_NULL)],
    Discriminator(
        _content_kind,
        custom_error_type="content_type",
        custom_error_message="a string, a list of content parts, or null",
    ),
]
"""A message's ``content``, one branch chosen by the JSON type sent, so that a refusal is that
branch's (until review R96 a list of numbers was told that content should be a string)."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="allow")

    role: str
    content: _Content = ""


class _StreamOptions(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    include_usage: bool | None = False


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    max_tokens: Integral | None = None
    max_completion_tokens: Integral | None = None
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    n: Integral | None = None
    best_of: Integral | None = None
    seed: Annotated[Integral, Field(ge=-INT64, lt=INT64)] | None = None
    top_k: Annotated[Integral, Field(ge=-1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[Integral, Field(ge=0, le=MAX_LOGPROBS)] | None = None


class ChatRequest(BaseModel):
    """A validated chat request: what the engine is asked to do."""

    model_config = ConfigDict(frozen=True)

    model: str | None
    """The model named by the client; ``None`` when it named none."""
    text: str
    """The prompt's canonical text (``agentgate.dispatch.prefix.prompt_text``)."""
    prompt_tokens: int
    """Estimated prompt length in tokens."""
    max_tokens: int
    """Tokens to generate, 1 to the context limit minus the prompt."""
    stream: bool
    """Answer as server-sent events."""
    include_usage: bool
    """Streaming only: end with a usage chunk."""


_JSON_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}
"""What a parsed JSON value was, in the words of JSON, for a refusal that names it."""


_MUST_BE = {
    "model_type": "a JSON object",
    "dict_type": "a JSON object",
    "content_type": "a string, a list of content parts, or null",
}
"""What a field of each of these error types takes, in plain words."""


def _refusal(error: ErrorDetails) -> str:
    """The message for the first validation error: where it is (the field of the body, never a
    union's branch), then what is wrong. Where an object was expected (the body, a message,
    ``stream_options``, a content part) or a message's content is of no type it takes, it says so
    in plain words rather than pydantic's, which names the private model (until review R92 a body
    of ``[1, 2]`` got "Input should be a valid dictionary or instance of _Body"; until review R96
    content of ``[1]`` got "messages.0.content.str: Input should be a valid string")."""
    where = ".".join(str(part) for part in error["loc"] if part not in _TAGS) or "the body"
    must_be = _MUST_BE.get(error["type"])
    if must_be is None:
        return f"{where}: {error['msg']}"
    given = _JSON_NAMES.get(type(error["input"]), "another type")
    return f"{where} must be {must_be}, not {given}"


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _check_prompt_items(data: object) -> None:
    """Refuse (``InputError``) ``messages`` holding more than ``MAX_PROMPT_ITEMS`` messages and
    content parts in all, counting no further than the bound; a body of any other shape is left
    to the validation that follows."""
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list):
        return
    items = len(messages)
    for message in messages:
        if items > MAX_PROMPT_ITEMS:
            break
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            items += len(content)
    if items > MAX_PROMPT_ITEMS:
        raise InputError(
            f"messages: more than {MAX_PROMPT_ITEMS} messages and content parts in all; the "
            f"simulated backend reads at most {MAX_PROMPT_ITEMS}"
        )


def parse_chat(raw: bytes, max_model_len: int) -> ChatRequest:
    """Read a chat-completions body, refusing anything the simulated backend cannot serve.

    Raises ``InputError`` naming the offending field: for bytes that are not strict JSON (or nest
    too deeply), more than ``MAX_PROMPT_ITEMS`` messages and content parts, fields of the wrong
    type or outside vLLM's range (see the module docstring), ``n`` or ``best_of`` other than 1, a ``max_tokens`` outside 1..``max_model_len``, or a prompt plus
    ``max_tokens`` longer than ``max_model_len`` tokens.
    """
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InputError("the body nests too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"the body is not JSON: {exc}") from None
    _check_prompt_items(data)
    try:
        body = _Body.model_validate(data)
    except ValidationError as exc:
        raise InputError(_refusal(exc.errors()[0])) from None
    for name in _ONE_CHOICE:
        value = getattr(body, name)
        if value is not None and value != 1:
            raise InputError(
                f"{name}: the simulated backend generates one choice per request; "
                f"send {name}=1 (or leave it out), not {json.dumps(data[name])[:40]}"
            )
    if body.top_logprobs and not body.logprobs:
        # vLLM's own check (``check_logprobs``): log-probabilities of the top tokens of nothing.
        raise InputError("top_logprobs: when using `top_logprobs`, `logprobs` must be set to true.")
    # The field named is the one read: max_completion_tokens takes precedence (until review R60 a
    # refused max_completion_tokens was reported as max_tokens, which the body may hold valid).
    field, max_tokens = (
        ("max_tokens", body.max_tokens)
        if body.max_completion_tokens is None
        else ("max_completion_tokens", body.max_completion_tokens)
    )
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not 1 <= max_tokens <= max_model_len:
        raise InputError(f"{field} must be an integer from 1 to {max_model_len}, not {max_tokens}")
    text = prompt_text(data["messages"])
    prompt_tokens = estimate_prompt_tokens(data["messages"])
    if prompt_tokens + max_tokens > max_model_len:
        raise InputError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
            "the completion). Please reduce the length of the messages or completion."
        )
    if data.get("stream_options") and not data.get("stream"):
        # vLLM's own check (``validate_stream_options``), on the body as sent: an empty object
        # passes, any other needs ``stream: true``. Until review R60 the simulator served it.
        raise InputError("stream_options: Stream options can only be defined when `stream=True`.")
    options = body.stream_options
    return ChatRequest(
        model=body.model,
        text=text,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(body.stream),
        include_usage=bool(options is not None and options.include_usage),
    )
