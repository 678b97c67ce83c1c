"""The prompt reserved counts every body field a chat template renders (review R83).

vLLM hands a chat template the body's ``documents`` (a retrieval template, Command-R's or
Granite's, prints each) and ``chat_template_kwargs`` (whose values a template may print) beside
the messages and the tools. Until R83 the reservation counted the messages and the tools only: a
caller with 100 micro-dollars left could send a megabyte of documents on a reservation of a few
tokens, and the backend did all the work. Over real HTTP on 127.0.0.1, with
``test_gateway_r57_streams``'s ``Chattering`` backend."""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import RESERVED, Env, _in_service, _settled
from test_gateway_r57_streams import Chattering

from agentgate.dispatch.gateway import invocation_headers
from agentgate.dispatch.prefix import estimate_tokens

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env

_LONG = "x" * 40_000
RENDERED = {
    "documents": [{"title": "notes", "text": _LONG}],
    "chat_template_kwargs": {"context": _LONG},
}
"""Each field carries 10,000 tokens of text (four characters a token) that a template renders."""


def _charged_as_reserved(env: Env, chattering: Chattering, body: dict[str, Any]) -> int:
    """What ``body`` is charged when its answer reports no completion count: its reservation."""
    _in_service(env)
    chattering.json_answer = json.dumps(
        {
            "id": "c",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5},
        }
    ).encode()
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("json"):
        answer = env.post(body)
    assert answer.status_code == 200, answer.text
    assert _settled(env, count + 1)[-1].status == "ok"
    return env.spent() - spent


@pytest.mark.parametrize("field", sorted(RENDERED))
def test_a_field_the_template_renders_counts_in_the_reservation(
    env: Env, chattering: Chattering, field: str
) -> None:
    """Review R83: ``documents`` and ``chat_template_kwargs`` were reserved as no prompt at all."""
    value = RENDERED[field]
    reserved = RESERVED + estimate_tokens(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    assert _charged_as_reserved(env, chattering, _body(**{field: value})) == reserved


@pytest.mark.parametrize("field", sorted(RENDERED))
def test_a_budget_too_small_for_the_rendered_prompt_refuses_the_call_before_it_is_sent(
    env: Env, chattering: Chattering, field: str
) -> None:
    """The point of counting them: a caller whose whole budget is 100 micro-dollars sending 10,000
    tokens of documents is refused 402 before any backend runs it (until R83 it was sent)."""
    _in_service(env)
    poor = env.gate.issue(env.root, name="poor", key=env.poor_key, role="thrifty")
    body = _body(**{field: RENDERED[field]})
    signed = invocation_headers(poor.key, poor.chain, body)
    answer = _http.post(env.url, json=body, headers=signed, timeout=20)
    assert answer.status_code == 402, answer.text
    assert answer.json()["error"]["code"] == "budget_too_small"
