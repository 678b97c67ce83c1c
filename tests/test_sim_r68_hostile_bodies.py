"""Review R68 of hostile chat bodies sent to the simulated backend: each is a clear 400.

Sent over real HTTP on loopback, streamed and not: a ``max_tokens`` of 10**30, 2**63, 1e308,
-1, 0 or ``true``, ``NaN``, no ``messages``, ``messages`` null, empty, a string or a list of
numbers, a body that is not an object, not JSON or not UTF-8. Each is answered 400 with an OpenAI
error body whose message names the field, promptly (never a 500, never a hang): they were
already, and stay so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import _http
import pytest

from agentgate.sim import SimServer

_HI = [{"role": "user", "content": "hi"}]
BODIES: dict[str, tuple[bytes, str]] = {
    "max_tokens_10_30": (json.dumps({"messages": _HI, "max_tokens": 10**30}).encode(), "max_tokens"),
    "max_tokens_2_63": (
        json.dumps({"messages": _HI, "max_completion_tokens": 2**63}).encode(),
        "max_completion_tokens",
    ),
    "max_tokens_1e308": (json.dumps({"messages": _HI, "max_tokens": 1e308}).encode(), "max_tokens"),
    "max_tokens_negative": (json.dumps({"messages": _HI, "max_tokens": -1}).encode(), "max_tokens"),
    "max_tokens_zero": (json.dumps({"messages": _HI, "max_tokens": 0}).encode(), "max_tokens"),
    "max_tokens_true": (json.dumps({"messages": _HI, "max_tokens": True}).encode(), "max_tokens"),
    "max_tokens_nan": (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": NaN}', "JSON"),
    "no_messages": (json.dumps({"max_tokens": 5}).encode(), "messages"),
    "messages_null": (json.dumps({"messages": None}).encode(), "messages"),
    "messages_empty": (json.dumps({"messages": []}).encode(), "messages"),
    "messages_string": (json.dumps({"messages": "hi"}).encode(), "messages"),
    "messages_numbers": (json.dumps({"messages": [1, 2]}).encode(), "messages"),
    "body_a_list": (b"[1, 2]", "body"),
    "body_not_json": (b"{", "JSON"),
    "body_not_utf8": (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "JSON"),
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=0.01) as made:
        yield made


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_hostile_chat_body_is_a_400_naming_what_is_wrong(
    server: SimServer, case: str, stream: bool
) -> None:
    """Review R68: a hostile chat body is a 400 with an OpenAI error body naming the field."""
    body, named = BODIES[case]
    if stream and body.startswith(b"{") and body.endswith(b"}"):
        body = body[:-1] + b', "stream": true}'
    with _http.Client(timeout=10) as http:
        answer = http.post(
            f"http://127.0.0.1:{server.port}/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and named in error["message"]
