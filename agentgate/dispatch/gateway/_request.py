"""What the gateway reads from a chat request before deciding it: the body, bounded in size
(``max_body_bytes``, default ``MAX_BODY_BYTES``) and in time (``body_timeout_s``, default
``BODY_TIMEOUT_S``; both ``Gateway`` settings), declared as JSON or not at all
(``_declared_not_json``) and checked as a chat completion request of one choice; the prompt
tokens reserved for it (all three read from the body at once by ``read_chat_request``); the
bearer token of its ``Authorization`` header, and whether a header that carries credentials is
repeated (``_repeated_credentials``).
A body refused raises ``InputError`` naming what is wrong (``FieldError`` for one field at fault,
``BodyTooLarge`` for one over the limit, ``BodyTimedOut`` for one too slow).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request

from agentgate._http_limits import declared_length
from agentgate._json import once_each
from agentgate.capabilities import Call
from agentgate.dispatch._engine_fields import FieldError, check_engine_fields
from agentgate.dispatch.gateway._authority import APPROVAL_HEADER
from agentgate.dispatch.gateway._client import INVOCATION_HEADER, chat_call, max_tokens_of
from agentgate.dispatch.prefix import estimate_prompt_tokens, estimate_tokens, prompt_tokens_most
from agentgate.errors import InputError

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Default most bytes of a request body (``Gateway(max_body_bytes=...)``)."""
BODY_TIMEOUT_S = 60.0
"""Default seconds a client has to send a whole request body once its head has arrived
(``Gateway(body_timeout_s=...)``)."""
CREDENTIAL_HEADERS = ("Authorization", INVOCATION_HEADER, APPROVAL_HEADER)
"""The headers that carry a call's credentials: each may be sent once (``_repeated_credentials``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request's body as read and checked (``read_chat_request``): what its decision needs."""

    body: dict[str, Any]
    """The body, a checked chat completion request (``_parse_body``)."""
    call: Call
    """The call it makes, its canonical JSON hashed (``chat_call``)."""
    max_tokens: int
    """Its output limit (``max_tokens_of``)."""
    prompt: int
    """The prompt tokens reserved for it (``_prompt_estimate``)."""
    prompt_most: int
    """The most prompt tokens its outcome is charged (``prompt_tokens_most``)."""


class BodyTooLarge(InputError):
    """A request body over the gateway's ``max_body_bytes``, read or declared (answered 413)."""


class BodyTimedOut(InputError):
    """A request body that had not all arrived ``body_timeout_s`` after its head (answered 408)."""


async def _read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The request body, refused (``BodyTooLarge``) as soon as it passes ``max_bytes``, or
    (``BodyTimedOut``) when it has not all arrived ``timeout_s`` after the head (a client
    trickling its body)."""
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                size += len(part)
                if size > max_bytes:
                    raise BodyTooLarge(f"the body is over {max_bytes} bytes")
                parts.append(part)
    except TimeoutError:
        raise BodyTimedOut(f"the body did not arrive within {timeout_s:g} s") from None
    return b"".join(parts)


def _declared_too_large(request: Request, max_bytes: int) -> str | None:
    """Why the body is refused before any of it is read: its caller waits for ``100 Continue``
    before it sends it (``Expect: 100-continue``) and declares a ``Content-Length`` over
    ``max_bytes``; else ``None``. (A caller that does not wait is already sending: its body
    is read up to the limit, ``_read_body``, since a refusal with the rest unread could be lost
    in the connection's reset.)"""
    if request.headers.get("expect", "").strip().lower() != "100-continue":
        return None
    declared = declared_length(request.headers.get("content-length", ""))
    if declared is None or declared <= max_bytes:
        return None
    return f"the body is over {max_bytes} bytes (Content-Length: {declared})"


def _declared_not_json(headers: Headers) -> str | None:
    """Why the body is refused before it is read for the type it is declared as; else ``None``.

    Read as vLLM (FastAPI) reads a body: with no (or an empty) ``Content-Type`` as JSON, with
    ``application/json`` or ``application/*+json`` (any parameters) as JSON, and with any other
    type (``text/plain``, a form) not at all, which it refuses with a 400. Every
    ``Content-Type`` header counts (a proxy in front may have read another one). Until review
    R60 the gateway decided and served a JSON body declared ``text/plain``, which the backend
    it stands before refuses."""
    for declared in headers.getlist("content-type"):
        media = declared.partition(";")[0].strip().lower()
        kind, _, subtype = media.partition("/")
        if declared.strip() and not (
            kind == "application" and (subtype == "json" or subtype.endswith("+json"))
        ):
            return f"the body must be JSON (Content-Type: application/json), not {declared[:60]!r}"
    return None


_one_of_each_key = once_each(
    lambda key: InputError(f"the body has the key {key[:60]!r} twice in one object: send each key once")
)
"""A JSON object's hook that refuses a key it holds twice: readers differ on which of two values
counts (Python's parser and vLLM keep the last, others the first), and a proxy in front may have
checked the other one. Until review R60 the gateway decided and served ``{"model": "a", "model":
"b", ...}`` as a call to ``b``."""


def _parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a chat completion request; raises ``InputError`` naming what is wrong."""
    try:
        body = json.loads(raw, object_pairs_hook=_one_of_each_key)
    except ValueError as exc:
        raise InputError(f"the body is not JSON ({exc})") from None
    except RecursionError:
        raise InputError("the body is nested too deeply") from None
    if not isinstance(body, dict):
        raise InputError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise FieldError("messages", "'messages' must be a non-empty list of message objects")
    # What vLLM's validation of a message refuses with a 400 (a role that is not text, content
    # that is neither text, a list of parts nor null): refused here, before the call is decided
    # and reserved only to be refused by the backend. Until review R60 the gateway decided them.
    for i, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise FieldError(f"messages.[{i}].role", f"'messages[{i}].role' must be a string")
        content = message.get("content")
        # A part is an object (vLLM's parts are typed dicts, some without a ``type``: its
        # ``{"image_url": ...}``); until review R81 ``[1]``, ``["hi"]`` or ``[null]`` passed, and
        # the call was decided and counted against its quotas before the backend refused it.
        if not isinstance(content, str | list | None) or (
            isinstance(content, list) and not all(isinstance(part, dict) for part in content)
        ):
            raise FieldError(
                f"messages.[{i}].content",
                f"'messages[{i}].content' must be a string, a list of content parts (objects) or null",
            )
    # OpenAI's API takes ``"stream": null`` as false (the SDKs send it for ``stream=None``).
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise FieldError("stream", "'stream' must be true, false or null")
    # vLLM refuses both with a 400 (its model validation, then ``validate_stream_options`` on the
    # body as sent: an empty object passes): refused here, the call is never decided and reserved
    # only to be refused by the backend. Until review R60 the gateway decided them.
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise FieldError("stream_options", "'stream_options' must be an object or null")
    if options and not body.get("stream"):
        raise FieldError(
            "stream_options", "'stream_options': Stream options can only be defined when `stream=True`."
        )
    # One choice, max_tokens the one output limit, no engine field that picks what the call was
    # not decided on: the dispatcher refuses the same (review R84), from the same definition.
    check_engine_fields(body)
    return body


def read_chat_request(raw: bytes) -> ChatRequest:
    """The request body ``raw`` read as a chat completion request, with the call it makes and the
    prompt tokens reserved for it; raises ``InputError`` naming what is wrong (``FieldError`` for
    one field at fault).

    Its work grows with the body, up to ``max_body_bytes`` (8 MiB by default: a body of 150,000
    small messages took 2 s on the development machine to parse, hash and estimate), and it runs
    before the caller is authenticated: the gateway runs it in a worker thread, with the
    decision (``Gateway._read_and_decide``), never on the event loop. That does not free the
    loop wholly: its longest parts are each one call in C that holds the GIL until it returns
    (the body's ``json.loads``; for a body with floats or more than ``MAX_PLAIN_CONTAINERS``
    objects and lists, the canonical JSON's ``json.dumps``), and the loop waits for each, a
    fraction of a second per multi-megabyte body (docs/gateway.md, "Review R89")."""
    body = _parse_body(raw)
    call = chat_call(body)
    return ChatRequest(
        body, call, max_tokens_of(body), _prompt_estimate(body), prompt_tokens_most(len(raw), body)
    )


_RENDERED = ("tools", "functions", "documents", "chat_template_kwargs")
"""Body fields besides the messages that a chat template renders into the prompt (vLLM passes each
to ``apply_chat_template``): the tool (or legacy function) definitions, the documents of a
retrieval template (Command-R's, Granite's), and the template's own arguments, whose values a
template may print (until review R83 ``documents`` and ``chat_template_kwargs`` were not counted:
a megabyte of documents was reserved as no prompt at all)."""


def _prompt_estimate(body: Mapping[str, Any]) -> int:
    """The prompt tokens reserved for a checked chat body: its messages' text and, since a chat
    template renders them into the prompt too, its messages' other fields (an assistant turn's
    ``tool_calls`` and their arguments, a ``name``) and the body's fields in ``_RENDERED`` (as
    compact JSON), at four characters a token; each media content part (an image, audio, a file)
    at ``media_part_tokens`` (``estimate_prompt_tokens``), never at the length of its base64."""
    tokens = estimate_prompt_tokens(body["messages"])
    for message in body["messages"]:
        if rest := {k: v for k, v in message.items() if k != "role" and k != "content"}:
            tokens += estimate_tokens(json.dumps(rest, separators=(",", ":"), ensure_ascii=False))
    for name in _RENDERED:
        if body.get(name):
            tokens += estimate_tokens(json.dumps(body[name], separators=(",", ":"), ensure_ascii=False))
    return tokens


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _repeated_credentials(headers: Headers) -> str | None:
    """Why the request's credentials are ambiguous: one of ``CREDENTIAL_HEADERS`` sent more than
    once (each would be read as the first one, where a proxy or another server may read the last,
    or join them); else ``None``."""
    for name in CREDENTIAL_HEADERS:
        if (count := len(headers.getlist(name))) > 1:
            return f"the request has {count} {name} headers: send one"
    return None
