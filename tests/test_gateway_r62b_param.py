"""A 400 for one field at fault names it in the error body's ``param`` (review R62, second round).

OpenAI's error body is ``{"error": {"message", "type", "param", "code"}}``, where ``param`` names
the request field at fault (``"max_tokens"``, ``"messages.[0].role"``); the gateway's was always
null. It now names the field when one field is at fault and stays null otherwise (a body that is
not JSON, a key sent twice, a value with no canonical JSON form). A real gateway on loopback."""

from __future__ import annotations

import json
import math
from typing import Any

from test_gateway import MODEL, Env, _messages, _post

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

_ONE_FIELD: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 8, "max_completion_tokens": "5"}, "max_completion_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": 1, "content": "hi"}]}, "messages.[0].role"),
    ({"messages": [*_messages(), {"role": "user", "content": 5}]}, "messages.[1].content"),
    ({"model": None}, "model"),
    ({"model": "no such/../model"}, "model"),
    ({"n": 2}, "n"),
    ({"best_of": 3}, "best_of"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": 5}, "stream_options"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"priority": 5}, "priority"),
]


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": _messages(), "max_tokens": 8, **fields}


def _error(env: Env, body: Any) -> dict[str, Any]:
    answer = _post(env, body)
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


def test_a_400_for_one_field_names_it_in_param(env: Env) -> None:
    """Review R62: every 400 had ``"param": null``; one that one field caused names that field,
    as OpenAI's API does (``messages.[i].role`` for a message's field)."""
    named = [(fields, _error(env, _body(**fields))["param"]) for fields, _ in _ONE_FIELD]
    assert named == _ONE_FIELD


def test_a_400_no_one_field_caused_has_a_null_param(env: Env) -> None:
    """Review R62: a body that is not JSON, has a key twice, or a value with no canonical JSON
    form is no one field's fault: its ``param`` stays null."""
    assert _error(env, b"{")["param"] is None
    assert _error(env, b'{"model": "a", "model": "b", "messages": []}')["param"] is None
    not_canonical = _body(temperature=math.nan)
    assert _error(env, json.dumps(not_canonical).encode())["param"] is None
