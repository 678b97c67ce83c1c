"""What a backend's answer is read into (``Usage``, ``ChatChunk``, ``ChatResult``) and the readers
of the fields a streamed and a whole answer share: its usage, a choice's finish reason, an error
reported with HTTP 200. Each refuses what is not what OpenAI's API promises (``ValueError``,
``TypeError``; ``BackendFailed`` for a reported error). And the reader of the output limit a call
asks for (``output_limit``), which what its answer may be is measured against."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentgate._json import integral
from agentgate.dispatch._redaction import _cut_whole, _prompt_texts, _quoted_echo, _scrub_start
from agentgate.errors import BackendFailed, DispatchError


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts a backend reported: non-negative integers, always (budgets are charged and
    counters incremented with them, and neither takes a negative count).

    Raises ``ValueError`` when built with anything else; ``_usage`` reads a backend's answer into
    one, and refuses (``BackendFailed``, through its callers) what would not make one.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        for count in (self.prompt_tokens, self.completion_tokens, self.cached_tokens):
            if type(count) is not int or count < 0:
                raise ValueError(f"a token count must be a non-negative integer, not {count!r}")


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One streamed piece of an answer."""

    content: str
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """The delta's tool call fragments (OpenAI's ``delta.tool_calls``), passed on as sent."""
    event: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The whole event as the backend sent it, decoded: what it carries beside the fields above
    (a reasoning model's ``delta.reasoning_content``, ``logprobs``, its ``id``); empty if not kept."""
    backend: str = ""
    """The name of the backend that sent it (empty for a chunk made elsewhere)."""
    size: int = 0
    """The length of the event as the backend sent it (its ``data``, in characters; 0 for a chunk
    made elsewhere): what holding it costs, counted against ``STREAM_AHEAD_BYTES``."""


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A complete answer."""

    backend: str
    content: str
    finish_reason: str | None
    usage: Usage
    body: Mapping[str, Any]
    raw: bytes = field(default=b"", repr=False)
    """The body as the backend sent it (``body`` is its decoded form); empty if not kept. A key sent
    twice in one object is here twice, and once in ``body``, the last copy: pass ``body`` on (the
    gateway sends it encoded again), not these bytes, for a reader to see the copy checked."""


def _reject_error(
    backend: str, body: object, key: str | None = None, request: Mapping[str, Any] | None = None
) -> None:
    """Raise ``BackendFailed`` if ``body`` is an error the backend reports with HTTP 200: OpenAI's
    ``{"error": {...}}``, or vLLM's ``{"object": "error", "message": ...}``, which it sends as a
    stream event when generation fails mid-stream and then ends the stream with ``[DONE]`` (read
    as chunks, that would be a short answer passed off as a whole one). Its message (a detail
    that is no text as JSON writes it) is quoted scrubbed of ``key`` and of the prompt of
    ``request`` (``_prompt_texts``) as it came, before it is cut and written with ``repr``: until review R89
    the prompt was scrubbed after, where ``repr`` had escaped a quote, a backslash or a character
    that is not printable in it, and the rest of an echoed prompt was quoted from there on."""
    if not isinstance(body, Mapping):
        return
    error = body.get("error")
    if error is None and body.get("object") != "error":
        return
    detail = error.get("message", error) if isinstance(error, Mapping) else error or body.get("message")
    said = detail if isinstance(detail, str) else orjson.dumps(detail).decode()
    excerpt = _cut_whole(_scrub_start(said, key, _prompt_texts(request), 1024), 200)
    raise BackendFailed(f"{backend}: the backend reported an error: {excerpt!r}")


MAX_USAGE_TOKENS = 1_000_000_000
"""The most tokens one count of one call's usage may report (no context window comes near a
billion tokens): a larger count is garbage, not a bill."""


_OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens")
"""The fields naming a call's output limit, in the order they are read (as OpenAI and vLLM read them)."""


def output_limit(payload: Mapping[str, Any]) -> int | None:
    """The output limit (tokens) ``payload`` names: its ``max_completion_tokens``, else its
    ``max_tokens``, as vLLM reads them (``or``: absent, null or 0 names none); ``None`` when it
    names none (the backend's own default applies). The one reader of it: the router's
    (``Dispatcher.route_request``), a non-streamed answer's deadline (``Timeouts.answer_s``) and
    a stream's answer bound (``_answer_limit``) all read it here.

    Each field may be an integer, or a float with no fractional part read as that integer (as
    vLLM's lax pydantic reads it, below 2**63), from 0 to ``MAX_USAGE_TOKENS``. Raises
    ``DispatchError`` naming the field for anything else: text (``"100"``), a bool, a fraction,
    a negative or larger number. Both fields are checked, as vLLM validates both. Until review
    R61 the router read ``int()`` of the value (``5.5`` as 5, ``"100"`` as 100, ``true`` as 1)
    while the deadline and the stream bound took such values as no limit: a stream with
    ``max_tokens: "100"`` was routed for 100 tokens and streamed with no bound.
    """
    limits = [_whole_tokens(name, payload.get(name)) for name in _OUTPUT_LIMITS]
    return limits[0] or limits[1] or None


def _whole_tokens(name: str, value: object) -> int:
    """``value`` of the field ``name`` as a count of tokens (``None`` as 0); raises
    ``DispatchError`` when it is no whole number from 0 to ``MAX_USAGE_TOKENS``."""
    if value is None:
        return 0
    value = integral(value)
    if type(value) is not int or not 0 <= value <= MAX_USAGE_TOKENS:
        raise DispatchError(f"{name} must be a whole number from 0 to {MAX_USAGE_TOKENS}, not {value!r:.40}")
    return value


MAX_FINISH_REASON_CHARS = 64
"""The longest ``finish_reason`` taken: the engines' are a word or two (``stop``, ``length``,
``tool_calls``, ``content_filter``, TGI's ``eos_token``)."""


def _finish_reason(
    choice: Mapping[str, Any], request: Mapping[str, Any] | None = None, key: str | None = None
) -> str | None:
    """The choice's ``finish_reason``: a string of at most ``MAX_FINISH_REASON_CHARS`` printable
    characters, or ``None``; raises ``TypeError`` for anything else, quoting it scrubbed of the
    API key ``key`` and the prompt of ``request`` (``_quoted_echo``). Until review R62 a reason of 1 MB, or one holding an
    escape, was passed on, logged and recorded as it came."""
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"finish_reason is not a string: {_quoted_echo(reason, request, key=key)}")
    if reason is not None and not (len(reason) <= MAX_FINISH_REASON_CHARS and reason.isprintable()):
        raise TypeError(
            f"finish_reason is not a reason ({len(reason)} characters, at most {MAX_FINISH_REASON_CHARS} "
            f"printable ones): {_quoted_echo(reason, request, key=key)}"
        )
    return reason


def _count(
    raw: Mapping[str, Any], name: str, request: Mapping[str, Any] | None = None, key: str | None = None
) -> int:
    """A token count of ``raw``: absent or ``null`` is 0; an integer (or a float with an integral
    value, as orjson reads integers beyond 64 bits) from 0 to ``MAX_USAGE_TOKENS``.

    Raises ``ValueError`` for anything else: a negative or huge count, a fraction, ``true``, a
    string, quoting it scrubbed of the API key ``key`` and the prompt of ``request``
    (``_quoted_echo``).
    """
    value = raw.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage {name} is not a number: {_quoted_echo(value, request, key=key)}")
    if not (0 <= value <= MAX_USAGE_TOKENS) or value != int(value):
        raise ValueError(
            f"usage {name} is not a token count from 0 to {MAX_USAGE_TOKENS}: {_quoted_echo(value, request, key=key)}"
        )
    return int(value)


def _usage(raw: object, request: Mapping[str, Any] | None = None, key: str | None = None) -> Usage:
    """The usage a backend reported; ``None`` (not reported) is no usage.

    Raises ``ValueError`` (which the callers turn into ``BackendFailed``) for usage that is not an
    object or whose counts are not token counts (see ``_count``), quoting it scrubbed of the API
    key ``key`` and the prompt of ``request`` (``_quoted_echo``); ``prompt_tokens_details`` that is not an object is
    ignored, as engines that do not cache omit or null it.
    """
    if raw is None:
        return Usage()
    if not isinstance(raw, Mapping):
        raise ValueError(f"usage is not an object: {_quoted_echo(raw, request, key=key)}")
    details = raw.get("prompt_tokens_details")
    cached = _count(details, "cached_tokens", request, key) if isinstance(details, Mapping) else 0
    prompt = _count(raw, "prompt_tokens", request, key)
    return Usage(prompt, _count(raw, "completion_tokens", request, key), cached)


def reports_usage(raw: object) -> bool:
    """Whether an answer's ``usage`` (as the backend sent it; ``_usage`` has read it) names both
    its prompt and its completion token counts (neither absent nor ``null``). ``_usage`` reads a
    count left out as 0, which is right for ``cached_tokens`` but no bill: the gateway and the
    LangGraph middleware charge an answer whose usage leaves out either count its reservation
    ("no usage was reported"). Until review R68 one without ``prompt_tokens`` was charged its
    completion tokens alone, its prompt free."""
    return (
        isinstance(raw, Mapping)
        and raw.get("prompt_tokens") is not None
        and raw.get("completion_tokens") is not None
    )
