"""Review R62 of what the dispatcher sends a backend for a call that names no output limit.

``output_limit`` reads ``max_tokens`` (or ``max_completion_tokens``) absent, null or 0 as no limit,
as vLLM does, and the router then predicts and debits the tenant's token bucket for
``DEFAULT_OUTPUT_TOKENS`` (256). The payload went to the backend as it was, so the backend
generated up to its own default (vLLM: the rest of its context window, 100,000 tokens and more)
for a reservation of 256: ``max_tokens: 0`` escaped the tenant's quota, the answer deadline and
the stream's character bound. The dispatcher now sends such a call with the limit it reserved.
"""

from __future__ import annotations

import http.server
import json
from typing import Any

import pytest
from test_broker_library_use import MODEL, RawBackend, _inventory

from agentgate.dispatch.backends import DEFAULT_OUTPUT_TOKENS
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router

ANSWER = (
    b'{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1}}'
)
STREAM = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class RecordingBackend(RawBackend):
    """Answers every chat call at once and keeps the bodies it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

        def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
            body = json.loads(handler.body)  # type: ignore[attr-defined]
            self.bodies.append(body)
            answer, kind = (
                (STREAM, "text/event-stream") if body.get("stream") else (ANSWER, "application/json")
            )
            handler.send_response(200)
            handler.send_header("content-type", kind)
            handler.send_header("content-length", str(len(answer)))
            handler.end_headers()
            handler.wfile.write(answer)

        super().__init__(respond)


NO_LIMIT = [
    pytest.param({"max_tokens": 0}, id="max_tokens-0"),
    pytest.param({"max_tokens": None}, id="max_tokens-null"),
    pytest.param({}, id="absent"),
    pytest.param({"max_completion_tokens": 0, "max_tokens": 0.0}, id="both-0"),
    pytest.param({"max_completion_tokens": None}, id="max_completion_tokens-null"),
]


@pytest.mark.parametrize("limit", NO_LIMIT)
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_call_naming_no_output_limit_is_sent_with_the_limit_it_was_routed_and_debited_for(
    limit: dict[str, Any], streamed: bool
) -> None:
    """Review R62: a call with ``max_tokens`` 0, null or absent was debited and routed for
    ``DEFAULT_OUTPUT_TOKENS`` but sent as it was, which vLLM reads as no limit (the rest of its
    context window); the backend now receives ``max_tokens`` 256 and no ``max_completion_tokens``."""
    backend = RecordingBackend()
    try:
        inv = _inventory(backend.url)
        payload = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **limit}
        async with Dispatcher(inv, Router(inv)) as d:
            if streamed:
                async for _ in d.stream({**payload, "stream": True}):
                    pass
            else:
                await d.chat(payload)
        (sent,) = backend.bodies
        assert sent["max_tokens"] == DEFAULT_OUTPUT_TOKENS
        assert "max_completion_tokens" not in sent
        assert sent["messages"] == payload["messages"]
    finally:
        backend.stop()


@pytest.mark.parametrize(
    "limit", [{"max_tokens": 7}, {"max_completion_tokens": 7}, {"max_completion_tokens": 7, "max_tokens": 0}]
)
async def test_a_call_naming_its_output_limit_is_sent_unchanged(limit: dict[str, Any]) -> None:
    """Review R62: a call that names its limit is sent as it was written (the fields as given)."""
    backend = RecordingBackend()
    try:
        inv = _inventory(backend.url)
        payload = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **limit}
        async with Dispatcher(inv, Router(inv)) as d:
            await d.chat(payload)
        assert backend.bodies == [{**payload, "stream": False}]
    finally:
        backend.stop()
