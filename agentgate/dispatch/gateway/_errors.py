"""The gateway's answers in OpenAI's error shape: ``error_response`` (a status and its OpenAI
``type``), the answer to a call allowed but not served (``_dispatch_error``), Starlette's own
404 and 405 (``_http_error``) and the HTTP protocol's refusals (``protocol_error``). What the dispatcher says about backends (their names, addresses and
bytes) goes to the gateway's log, never into an answer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentgate.dispatch.backends import MAX_ANSWER_BYTES, MAX_RETRY_AFTER_S
from agentgate.errors import (
    AgentGateError,
    AnswerTooLarge,
    BackendFailed,
    NoBackend,
    RequestRejected,
    Shed,
    UnknownModel,
    UsageUnreadable,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    500: "api_error",
    503: "service_unavailable",
}
_log = logging.getLogger("agentgate.dispatch.gateway._app")  # the gateway's one logger (docs/gateway.md)


class ErrorResponse(JSONResponse):
    """An OpenAI-style error answer, which knows its ``code`` (the gateway counts its answers by
    status and code, ``agentgate_gateway_errors_total``)."""

    def __init__(self, body: Mapping[str, Any], status: int, code: str, headers: Mapping[str, str]) -> None:
        super().__init__(body, status_code=status, headers=dict(headers))
        self.code = code


def error_response(
    status: int,
    message: str,
    code: str,
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
    param: str | None = None,
) -> ErrorResponse:
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}``, plus ``extra``'s
    top-level keys (an approval request: ``{"agentgate": "approval_required", "request": {...}}``).
    ``param`` names the request field at fault when one is (``"max_tokens"``), else null."""
    body: dict[str, Any] = {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "api_error"),
            "param": param,
            "code": code,
        },
        **(extra or {}),
    }
    return ErrorResponse(body, status, code, headers or {})


_PROTOCOL_CODES = {
    400: "invalid_http_request",
    408: "request_timeout",
    431: "request_header_fields_too_large",
    501: "transfer_coding_not_supported",
    503: "shutting_down",
    505: "http_version_not_supported",
}
"""The codes of the HTTP protocol's refusals (``agentgate/_bounded_http.py``), by status."""


def protocol_error(status: int, message: str) -> ErrorResponse:
    """The answer to a request the HTTP protocol refused before the app saw it (a head too large,
    too slow, unparsable, of another HTTP version, a transfer coding not supported): OpenAI's
    error shape, as every other refusal of the gateway (until review R61 it was plain text)."""
    return error_response(status, message, _PROTOCOL_CODES.get(status, "invalid_http_request"))


NOT_SERVED = "not_served"
"""The code of an allowed call that failed with an error that is not a ``DispatchError``."""


def _dispatch_error(exc: AgentGateError) -> Response:
    """The HTTP answer for a call that was allowed but could not be served (nothing was charged,
    but for an answer too large to read).

    A shed call gets the router's reason and its ``Retry-After`` (seconds, rounded up). A model
    that no backend serves is 404 ``model_not_found``, as OpenAI answers it (no later try can
    succeed). A backend failure or no backend gets a fixed message: what the dispatcher says
    (backend names and addresses, the backend's own bytes) is for the gateway's log, not for
    remote callers; when every backend that could serve the call is held down by its own
    ``Retry-After``, the seconds until the first is tried again (rounded up) are its
    ``Retry-After`` and in its message. A request the backend refused as invalid keeps the
    backend's message, it is about the request, but not the backend's name; any other error,
    the dispatcher's own included, is 503 ``not_served`` with a fixed message, its text logged.
    An answer over ``MAX_ANSWER_BYTES`` (``AnswerTooLarge``) is 400 ``answer_too_large``, charged its reservation:
    the call asked for it (a 4xx, which the OpenAI SDKs do not retry, each retry generating it again).
    An answer whose usage is not token counts (``UsageUnreadable``) is 502 ``backend_failed``,
    charged its reservation: the backend ran the call (until review R68 "nothing was charged").
    """
    if isinstance(exc, Shed):
        # The router's reason is the caller's to read (its SLO, its tenant's quota); what failed
        # before it (the dispatcher appends "(after: <backend>: <its error>; ...)") is not.
        reason, after, _ = str(exc).partition(" (after: ")
        if after:
            _log.warning("agentgate gateway: %s: %s", type(exc).__name__, exc)
        return error_response(429, reason, "shed", headers={"Retry-After": _seconds(exc.retry_after_s)})
    if isinstance(exc, UnknownModel):
        # Only a model the policy declares gets here (any other is refused 403 first), and which
        # models the gateway serves is public (``GET /v1/models``): the message may name it.
        _log.info("agentgate gateway: %s", exc)
        return error_response(404, f"{exc}; nothing was charged", "model_not_found")
    if isinstance(exc, UsageUnreadable):
        _log.warning("agentgate gateway: %s: %s", type(exc).__name__, exc)
        message = "the backend answered the call with a usage that cannot be read; the call was charged its reservation"
        return error_response(502, message, "backend_failed")
    if isinstance(exc, NoBackend | BackendFailed):
        _log.warning("agentgate gateway: %s: %s", type(exc).__name__, exc)
        status, code, failed = (
            (503, "no_backend", "no backend could take the call now")
            if isinstance(exc, NoBackend)
            else (502, "backend_failed", "the backends failed to answer the call")
        )
        if exc.retry_after_s is None:
            return error_response(status, f"{failed}; nothing was charged", code)
        retry = _seconds(exc.retry_after_s)
        message = f"{failed}: the backends asked not to be sent calls for {retry} s; nothing was charged"
        return error_response(status, message, code, headers={"Retry-After": retry})
    if isinstance(exc, AnswerTooLarge):
        _log.info("agentgate gateway: %s", exc)
        message = (
            f"the backend's answer was larger than {MAX_ANSWER_BYTES // (1 << 20)} MiB, which the gateway "
            "does not read: ask for fewer tokens or log-probabilities; the call was charged its reservation"
        )
        return error_response(400, message, "answer_too_large")
    if isinstance(exc, RequestRejected):
        # The backend's words are about the request, the caller's to read; which backend said
        # them (``BackendClient``'s "<name> rejected the request: ...") is the log's.
        _log.info("agentgate gateway: %s", exc)
        words = str(exc).partition(" rejected the request: ")[2]
        return error_response(400, f"the backend rejected the request: {words}", "rejected_by_backend")
    # Any other error (an ``InputError`` for a routing argument; the dispatcher's own, such as
    # "the dispatcher is not started" where the ASGI server ran no lifespan) has a fixed code and
    # message: its class name, the code until review R83, made the metrics' label set as open as
    # the exceptions that can get here, and until review R93 a ``DispatchError`` no backend
    # raised was answered 400 ``rejected_by_backend`` with its own text, which told the caller
    # its request was invalid (the SDKs do not retry a 400) and passed it the gateway's internals.
    _log.warning("agentgate gateway: %s: %s", type(exc).__name__, exc)
    return error_response(503, "the call could not be served; nothing was charged", NOT_SERVED)


def _seconds(delay: float) -> str:
    """A ``Retry-After`` value: ``delay`` in whole seconds, rounded up, at least 1 (for NaN too)
    and at most ``MAX_RETRY_AFTER_S``. Until review R82 an infinite ``delay`` (a shed for a quota
    refilling 1e-320 tokens a second; a routing policy's own ``Shed``) failed the answer with an
    ``OverflowError``."""
    if not delay > 1:  # NaN too
        return "1"
    return str(math.ceil(min(delay, MAX_RETRY_AFTER_S)))


async def _http_error(request: Request, exc: Exception) -> ErrorResponse:
    """Starlette's own refusals (a path not served: 404; a method not allowed: 405, with its
    ``Allow`` header) in OpenAI's error shape. Nothing is decided or audited: no call was made."""
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    message = f"{request.method} {request.url.path[:200]}: {exc.detail}"
    return error_response(exc.status_code, message, code, headers=exc.headers)


INTERNAL_ERROR = "the gateway failed on an internal error; its log says more"
"""The message of an unexpected error's answer: never the exception's text, which may carry secrets."""


async def _internal_error(request: Request, exc: Exception) -> ErrorResponse:
    """Starlette's answer to an unexpected error in one of its routes: an OpenAI-shaped 500
    ``internal_error``. Its caller (``Gateway._counted_internal_error``) logs the error once, first."""
    return error_response(500, INTERNAL_ERROR, "internal_error")
