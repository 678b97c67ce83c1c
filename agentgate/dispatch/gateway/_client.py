"""The caller's side of the gateway's header contract (docs/gateway.md, "Authenticating callers").

Every ``POST /v1/chat/completions`` carries two headers:

- ``Authorization: Bearer <chain>``: the caller's agentgate chain token (``ag1....``); with the
  ``openai`` client this is simply the ``api_key``.
- ``X-Agentgate-Invocation: <invocation>``: an invocation (``agi1....``, docs/token-format.md)
  signed by the chain's holder over ``model:<model>`` / ``generate`` with the arguments
  ``{"max_tokens": N, "body_sha256": D}``, where ``N`` is the body's ``max_completion_tokens``,
  else ``max_tokens``, else ``DEFAULT_MAX_TOKENS``, and ``D`` is the SHA-256 of the canonical JSON
  of the whole request body, plus ``"priority": P`` when the body names a priority class ``P``
  (its top-level ``priority`` string, a class of the policy's ``priority_classes``). The
  signature therefore binds the model, the output limit, the class and the exact prompt; the
  nonce makes it single-use.

``InvocationSigner`` is an httpx request hook that adds both headers to each request as it is
sent, so that any client built on httpx (``openai``, ``langchain_openai.ChatOpenAI``) signs the
exact bytes it sends, retries included (each retry is a new request, with a fresh nonce).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from agentgate._shown import quoted
from agentgate.authority import Chain, Invocation, args_digest, parse_chain
from agentgate.authority._invocation import MAX_INVOCATION_TTL
from agentgate.capabilities import Call
from agentgate.dispatch._engine_fields import FieldError
from agentgate.errors import CapabilityError, InputError, TokenFormatError
from agentgate.keys import SigningKey

INVOCATION_HEADER = "X-Agentgate-Invocation"
DEFAULT_MAX_TOKENS = 1024
"""The output limit reserved and enforced when the body names none."""
MAX_TOKENS_LIMIT = 1_000_000
PRIORITY_FIELD = "priority"
"""The body's optional field naming the call's priority class (never forwarded to the backend)."""
_CLASS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A policy name (``agentgate.policy``'s ``Name``): what a priority class is called."""


def max_tokens_of(body: Mapping[str, Any]) -> int:
    """The body's output limit (``max_completion_tokens``, else ``max_tokens``, else the default).

    Raises ``FieldError`` (an ``InputError``) naming the field read when it is present but not a
    whole number from 1 to 1,000,000. A float with no fractional part is that number (``5.0``), as vLLM's lax
    pydantic and the dispatcher's ``output_limit`` read it (until review R61 it was refused here).
    0 is refused, not read as "no limit": the limit is signed, reserved and enforced, and vLLM's
    ``SamplingParams`` and OpenAI's API refuse it too (until review R62 the message named
    ``max_tokens`` whichever field was read, and did not say what to send instead).
    """
    field, value = "max_completion_tokens", body.get("max_completion_tokens")
    if value is None:
        field, value = "max_tokens", body.get("max_tokens")
    if value is None:
        return DEFAULT_MAX_TOKENS
    if isinstance(value, float) and value.is_integer() and 0 < value <= MAX_TOKENS_LIMIT:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TOKENS_LIMIT:
        hint = (
            f": leave it out for the default of {DEFAULT_MAX_TOKENS} tokens (0 is not read as no limit)"
            if value == 0 and not isinstance(value, bool)
            else ""
        )
        raise FieldError(
            field, f"{field} must be a whole number from 1 to {MAX_TOKENS_LIMIT}, not {value!r:.40}{hint}"
        )
    return int(value)


def priority_of(body: Mapping[str, Any]) -> str | None:
    """The priority class the body names (its top-level ``priority``), ``None`` when it names none
    (the field absent or null).

    Whether the policy declares the class is the policy's business (a rule or grant constraining
    ``priority`` refuses an unknown one). Raises ``FieldError`` when the field is present but is
    not a string of a class name's form (a letter or digit, then up to 99 of ``A-Za-z0-9_.-``),
    e.g. vLLM's own integer ``priority``.
    """
    value = body.get(PRIORITY_FIELD)
    if value is None:
        return None
    if not isinstance(value, str) or _CLASS_NAME.fullmatch(value) is None:
        raise FieldError(
            PRIORITY_FIELD,
            f"'priority' must name a priority class of the policy (e.g. \"interactive\"), not {value!r:.60}",
        )
    return value


def chat_call(body: Mapping[str, Any]) -> Call:
    """The call a chat completion body makes: ``model:<model>`` / ``generate`` with
    ``max_tokens`` and ``body_sha256``, and ``priority`` when the body names a priority class.

    Raises ``FieldError`` (an ``InputError``) naming the field for a body without a model name,
    with a model name that is not a canonical resource name, or with a bad output limit or
    priority class; ``InputError`` for a value that has no canonical JSON form (NaN, infinity).
    """
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FieldError("model", "the body needs a 'model' string")
    try:
        digest = args_digest(body)
    except (TokenFormatError, TypeError, ValueError) as exc:
        raise InputError(f"the body has no canonical JSON form: {exc}") from None
    args: dict[str, Any] = {"max_tokens": max_tokens_of(body), "body_sha256": digest}
    priority = priority_of(body)
    if priority is not None:
        args[PRIORITY_FIELD] = priority
    try:
        return Call.model(model, args)
    except CapabilityError as exc:  # the arguments are checked above: the model name is at fault
        raise FieldError("model", str(exc)) from None


def invocation_headers(
    key: SigningKey, chain: Chain | str, body: Mapping[str, Any], *, ttl: int = 60
) -> dict[str, str]:
    """The two headers that authorize ``body`` for the holder of ``chain`` (signed with ``key``).

    ``body`` must be exactly what is sent (its canonical JSON is hashed). Raises ``InputError``
    as ``chat_call`` does, ``TokenFormatError`` for a chain that cannot be parsed.
    """
    parsed = chain if isinstance(chain, Chain) else parse_chain(chain)
    invocation = Invocation.sign(key, parsed, chat_call(body), ttl=ttl)
    return {"Authorization": f"Bearer {parsed.token}", INVOCATION_HEADER: invocation.encode()}


class InvocationSigner:
    """An httpx request hook that signs every chat completion request with the caller's key.

    ``openai.OpenAI(base_url=..., api_key=chain.token, http_client=signer.client())`` or
    ``ChatOpenAI(..., http_client=signer.client(), http_async_client=signer.async_client())``.
    Requests to other paths pass unchanged.
    """

    def __init__(self, key: SigningKey, chain: Chain | str, *, ttl: int = 60) -> None:
        """``ttl``: how long each invocation it signs is valid, in seconds.

        Raises ``InputError`` naming ``ttl`` unless it is a whole number from 1 to 300 (what the
        invocation format takes: docs/token-format.md), ``TokenFormatError`` for a chain that
        cannot be parsed. Until review R89 a ``ttl`` of 3600 made a signer whose every request
        then raised ``TokenFormatError`` out of httpx's request hook, far from where it was set.
        """
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= MAX_INVOCATION_TTL:
            raise InputError(
                f"ttl must be a whole number of seconds from 1 to {MAX_INVOCATION_TTL} (an invocation's"
                f" longest life), not {quoted(ttl)}"
            )
        self.key = key
        self.chain = chain if isinstance(chain, Chain) else parse_chain(chain)
        self.ttl = ttl

    def __call__(self, request: httpx.Request) -> None:
        """Add the headers to ``request`` if it is a chat completion; raises ``InputError`` for a
        body that is not a JSON object."""
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return
        try:
            body = json.loads(request.content)
        except ValueError:
            raise InputError("a chat completion body must be JSON") from None
        except RecursionError:
            raise InputError("a chat completion body is nested too deeply") from None
        if not isinstance(body, dict):
            raise InputError("a chat completion body must be a JSON object")
        request.headers.update(invocation_headers(self.key, self.chain, body, ttl=self.ttl))

    async def async_hook(self, request: httpx.Request) -> None:
        """The same hook for ``httpx.AsyncClient`` (whose hooks must be coroutines)."""
        self(request)

    def client(self, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` that signs its chat completion requests."""
        return httpx.Client(event_hooks={"request": [self]}, **kwargs)

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` that signs its chat completion requests."""
        return httpx.AsyncClient(event_hooks={"request": [self.async_hook]}, **kwargs)
