"""A backend's answer with a key twice in one object, over real HTTP on 127.0.0.1 (review R83).

orjson, which reads every answer, keeps the last copy of a key; every check and the charge read
that copy. Until R83 the gateway then sent the backend's bytes on as they came, both copies in
them, so a reader that keeps the first copy saw another answer and another usage than the ones
checked and charged. The caller now gets the answer as read, encoded again.

The backend is ``test_gateway_r57_streams``'s ``Chattering``, which sends a given JSON answer or
scripted stream."""

from __future__ import annotations

import json
from typing import Any

import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service, _settled
from test_gateway_r57_streams import Chattering

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env

_LONG = "x" * 5000
_ANSWER = (
    b'{"id":"c","object":"chat.completion",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"' + _LONG.encode() + b'"},'
    b'"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2000},'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"hi","content":"hi"},'
    b'"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1}}'
)
"""Each copy of ``choices`` and ``usage`` alone is a sound answer; the first is 5,000 characters
for 2,000 tokens, the last (the one orjson keeps) ``hi`` for one."""


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object read as a reader that keeps a key's first copy reads it."""
    kept: dict[str, Any] = {}
    for name, value in pairs:
        kept.setdefault(name, value)
    return kept


def _last_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def test_a_json_answer_with_a_key_twice_reaches_the_caller_as_checked_and_charged(
    env: Env, chattering: Chattering
) -> None:
    """Review R83: a 200 answer holding ``choices`` and ``usage`` twice was passed on byte for
    byte, charged 3 + 1 tokens for its last copies, while a first-wins reader read 5,000
    characters for 2,000 completion tokens. Every reader now reads the one answer charged."""
    _in_service(env)
    chattering.json_answer = _ANSWER
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code == 200, answer.text
    first = json.loads(answer.content, object_pairs_hook=_first_wins)
    last = json.loads(answer.content, object_pairs_hook=_last_wins)
    assert first == last, "the answer still carries a key twice"
    assert first["choices"][0]["message"]["content"] == "hi"
    assert first["usage"]["completion_tokens"] == 1
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 3 + 1  # the copy the caller reads is the copy charged


def test_a_streamed_event_with_a_key_twice_reaches_the_caller_once(env: Env, chattering: Chattering) -> None:
    """The stream's side, which held already (each event is encoded again as read): an event with
    ``choices`` twice reaches the caller with the copy that was counted, the last."""
    _in_service(env)
    chattering.script = (
        b'data: {"choices":[{"index":0,"delta":{"content":"' + _LONG.encode() + b'"}}],'
        b'"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
        b"data: [DONE]\n\n"
    )
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: {")]
    texts = []
    for event in events:
        first = json.loads(event, object_pairs_hook=_first_wins)
        assert first == json.loads(event, object_pairs_hook=_last_wins), event[:200]
        texts += [choice["delta"].get("content") or "" for choice in first["choices"]]
    assert "".join(texts) == "hi"


def test_a_json_answer_nested_too_deeply_to_encode_is_a_backend_failure(
    env: Env, chattering: Chattering
) -> None:
    """An answer is encoded again before it is passed on, and orjson encodes 254 levels at most
    (it reads 1,024): an answer nested deeper, which no chat completion is, is not the JSON
    promised, a backend failure released, as the other malformed answers (before R83 it was
    passed on as sent)."""
    _in_service(env)
    deep = b'{"x":' + b"[" * 300 + b"]" * 300 + b"}"
    chattering.json_answer = (
        b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi","extra":'
        + deep
        + b'},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}'
    )
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code in (502, 503), answer.text
    assert answer.json()["error"]["code"] in ("backend_failed", "no_backend")
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent
    assert env.held() == []
