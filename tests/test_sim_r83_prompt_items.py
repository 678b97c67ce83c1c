"""Review R83 of the simulated backend's reading of a chat body: how many items its prompt holds.

A 16 MiB body (under the body limit) of some 5.6 million empty content parts (``{}``) was walked
whole several times, on the server's event loop, before the context limit refused it: validated,
rendered as text, counted. ``/health`` and every stream in flight waited seconds meanwhile. A
body holding more than ``MAX_PROMPT_ITEMS`` (100,000) messages and content parts in all is now
refused with a 400 naming the bound, counted no further than the bound, before anything else
reads it (vLLM and OpenAI have no such bound; it is far above a real conversation's).
"""

from __future__ import annotations

import json

import _http
import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer, _request
from agentgate.sim._request import parse_chat

MAX_PROMPT_ITEMS = 100_000
"""The bound docs/simulation.md states."""

_BOUND = f"more than {MAX_PROMPT_ITEMS} messages and content parts in all"


def _parts_body(parts: int, messages: int = 1) -> bytes:
    """``messages`` messages, the first holding ``parts`` empty content parts."""
    first = b'{"role":"user","content":[' + b",".join([b"{}"] * parts) + b"]}"
    rest = b',{"role":"user","content":"hi"}' * (messages - 1)
    return b'{"messages":[' + first + rest + b"]}"


def test_the_bound_is_the_documented_one() -> None:
    assert getattr(_request, "MAX_PROMPT_ITEMS", None) == MAX_PROMPT_ITEMS


def test_a_prompt_of_more_parts_than_the_bound_is_refused_naming_it() -> None:
    """Review R83: 100,001 empty parts are some 100,000 estimated tokens, within the context
    limit: they were served, and 5.6 million were walked whole before the limit refused them."""
    with pytest.raises(InputError, match=f"^messages: {_BOUND}"):
        parse_chat(_parts_body(MAX_PROMPT_ITEMS), 131072)


def test_more_messages_than_the_bound_are_refused_naming_it() -> None:
    body = json.dumps({"messages": [{"role": "u"}] * (MAX_PROMPT_ITEMS + 1)}).encode()
    with pytest.raises(InputError, match=f"^messages: {_BOUND}"):
        parse_chat(body, 10**9)


def test_the_parts_of_several_messages_count_together() -> None:
    with pytest.raises(InputError, match=_BOUND):
        parse_chat(_parts_body(MAX_PROMPT_ITEMS - 1, messages=2), 10**9)


def test_a_prompt_of_exactly_the_bound_is_read() -> None:
    """One message and 99,999 parts: 100,000 items, read as before."""
    chat = parse_chat(_parts_body(MAX_PROMPT_ITEMS - 1), 131072)
    assert chat.prompt_tokens >= MAX_PROMPT_ITEMS - 1


def test_the_count_stops_at_the_bound() -> None:
    """The messages after the bound is passed are not read: one that is not an object there
    does not change the answer (the count, not the validation, refused the body)."""
    data = [{"role": "u", "content": [{}] * MAX_PROMPT_ITEMS}, {"role": "u"}, 7]
    with pytest.raises(InputError, match=f"^messages: {_BOUND}"):
        parse_chat(json.dumps({"messages": data}).encode(), 10**9)


def test_the_server_answers_400_naming_the_bound_and_keeps_serving() -> None:
    with SimServer(time_scale=0.001) as sim, _http.Client(base_url=sim.url, timeout=30) as http:
        answer = http.post(
            "/v1/chat/completions",
            content=_parts_body(MAX_PROMPT_ITEMS),
            headers={"content-type": "application/json"},
        )
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and _BOUND in error["message"]
        assert http.get("/health").status_code == 200
        served = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert served.status_code == 200
