"""A ``DispatchError`` no backend raised is 503 ``not_served``, not 400 ``rejected_by_backend`` (review R93).

Until R93 every ``DispatchError`` of no known kind was answered 400 ``rejected_by_backend``
(``invalid_request_error``) with its own text: "the dispatcher is not started: use `async with
Dispatcher(...)`..." reached every caller of a ``Gateway(...).app`` served without a lifespan,
told it its request was invalid (the OpenAI SDKs do not retry a 400), and passed it the
gateway's internals. Only a backend's refusal of the request (``RequestRejected``, which
``BackendClient`` raises: "<name> rejected the request: ...") is ``rejected_by_backend`` now; any
other error is ``not_served``, whatever its text."""

from __future__ import annotations

import json

from agentgate.dispatch.gateway._errors import NOT_SERVED, _dispatch_error
from agentgate.errors import DispatchError, RequestRejected

NOT_STARTED = "the dispatcher is not started: use `async with Dispatcher(...)` or `await start()`"


def _answer(exc: DispatchError) -> tuple[int, dict[str, str]]:
    response = _dispatch_error(exc)
    return response.status_code, json.loads(bytes(response.body))["error"]


def test_the_dispatchers_own_error_is_not_served_with_a_fixed_message() -> None:
    status, error = _answer(DispatchError(NOT_STARTED))
    assert (status, error["code"], error["type"]) == (503, NOT_SERVED, "service_unavailable")
    assert error["message"] == "the call could not be served; nothing was charged"
    assert "dispatcher" not in error["message"]


def test_a_backends_refusal_is_still_rejected_by_backend_without_its_name() -> None:
    status, error = _answer(RequestRejected("gpu-node-17 rejected the request: HTTP 400: context too long"))
    assert (status, error["code"], error["type"]) == (400, "rejected_by_backend", "invalid_request_error")
    assert error["message"] == "the backend rejected the request: HTTP 400: context too long"


def test_the_backends_wording_in_another_error_is_not_taken_for_a_refusal() -> None:
    status, error = _answer(DispatchError("b1 rejected the request: HTTP 400: quoted by a wrapper"))
    assert (status, error["code"]) == (503, NOT_SERVED)
    assert "wrapper" not in error["message"]
