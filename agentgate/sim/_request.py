"""The simulated backend's reading of an OpenAI chat-completions request body.

Everything a client sends is checked here, before the engine sees it, so that a malformed or
hostile body is an ``InputError`` (HTTP 400) and never a 500 or unbounded work: the body must be
strict JSON (no ``NaN``/``Infinity``, nesting within the parser's depth), a JSON object whose
``messages`` are a non-empty list of objects with a string ``role``; ``max_tokens`` (or
``max_completion_tokens``) an integer from 1 to the context limit, defaulting to 16; ``stream`` a
boolean and ``stream_options`` an object, and only with ``stream`` true (unless empty), as vLLM
refuses it otherwise; ``n`` and ``best_of`` absent, null or 1 (one choice per
request: the engine models one sequence per request, so a request for several is refused rather
than answered with one, and usage for one). Like vLLM, a request whose prompt plus ``max_tokens``
exceeds the context limit (``max_model_len``) is refused rather than queued.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentgate.dispatch.prefix import estimate_prompt_tokens, prompt_text
from agentgate.errors import InputError

DEFAULT_MAX_TOKENS = 16
"""Tokens generated when a request names no ``max_tokens`` (OpenAI's legacy default)."""
_ONE_CHOICE = ("n", "best_of")
"""Fields that ask for several sequences (vLLM honours both): absent, null or 1 here."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = ""


class _StreamOptions(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    include_usage: bool | None = False


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = False
    stream_options: _StreamOptions | None = None


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


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def parse_chat(raw: bytes, max_model_len: int) -> ChatRequest:
    """Read a chat-completions body, refusing anything the simulated backend cannot serve.

    Raises ``InputError`` naming the offending field: for bytes that are not strict JSON (or nest
    too deeply), fields of the wrong type, ``n`` or ``best_of`` other than 1, a ``max_tokens`` outside 1..``max_model_len``, or a
    prompt plus ``max_tokens`` longer than ``max_model_len`` tokens.
    """
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InputError("the body nests too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"the body is not JSON: {exc}") from None
    if isinstance(data, dict):
        for name in _ONE_CHOICE:
            value = data.get(name)
            if value is not None and (value != 1 or not isinstance(value, int) or isinstance(value, bool)):
                raise InputError(
                    f"{name}: the simulated backend generates one choice per request; "
                    f"send {name}=1 (or leave it out), not {json.dumps(value)[:40]}"
                )
    try:
        body = _Body.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise InputError(f"{where}: {first['msg']}") from None
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
