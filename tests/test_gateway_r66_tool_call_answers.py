"""Review R66: a whole answer whose message is a tool call without ``content`` is an answer.

TGI's chat completion answers a tool call with a message of ``role`` and ``tool_calls`` only (its
``OutputMessage::ToolCall``, serialized untagged: no ``content`` key at all, where vLLM and
OpenAI send ``"content": null``). Over real HTTP on 127.0.0.1, with ``test_gateway_r57_streams``'s
``Chattering`` backend sending the answer given."""

from __future__ import annotations

import json

import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service, _settled
from test_gateway_r57_streams import Chattering

_CALL = {"id": "0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}


chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "tool_calls": [_CALL]},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    ],
    ids=["tgi-no-content-key", "openai-content-null"],
)
def test_a_tool_call_answer_without_content_is_served_and_charged_its_usage(
    env: Env, chattering: Chattering, message: dict[str, object]
) -> None:
    """Review R66: TGI's tool call answer (no ``content`` key) was a ``BackendFailed``
    ("malformed chat completion: 'content'"): the call answered 502, sent again to every other
    backend and each marked down, though the backend had answered it well. It is the answer
    now, passed on and charged its usage, as the same answer with ``"content": null`` is."""
    _in_service(env)
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    chattering.json_answer = json.dumps({"id": "c", "choices": [choice], "usage": usage}).encode()
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["tool_calls"] == [_CALL]
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 7
