"""A streamed event whose usage is no object, over real HTTP on 127.0.0.1 (review R83).

A whole answer whose ``usage`` is no object is garbage (``UsageUnreadable``), and so was a stream
event's ``"usage": 1``; but a falsy one (``0``, ``[]``, ``""``, ``false``) was read as no usage at
all, and the event passed on to a caller that asked for usage (``stream_options.include_usage``)
with it as its usage. It is garbage now in a stream too: after output the stream ends with an
error event and is charged its reservation, as for any usage that cannot be read.

The backend is ``test_gateway_r57_streams``'s ``Chattering``, which sends a scripted stream."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import RESERVED, Env, _chunk, _in_service, _settled
from test_gateway_r57_streams import Chattering

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env

_USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
_DONE = b"data: [DONE]\n\n"


def _event_with_usage(usage: str) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"b"}}],"usage":' + usage.encode() + b"}\n\n"


def _usages_passed(text: str) -> list[object]:
    """The ``usage`` of each event the caller got that carries one."""
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    return [event["usage"] for event in events if "usage" in event]


@pytest.mark.parametrize("usage", ["0", "[]", '""', "false"])
def test_a_streamed_usage_that_is_no_object_is_garbage(env: Env, chattering: Chattering, usage: str) -> None:
    """Review R83: ``"usage": 0`` on an event after output reached a caller that asked for usage
    as the event's usage, and the stream was charged the usage that came after it. Such a usage
    is unreadable now: the stream ends with an error event, charged its reservation, and no
    event the caller gets carries a usage that is no object."""
    _in_service(env)
    chattering.script = _chunk("a") + _event_with_usage(usage) + _USAGE + _DONE
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
    assert answer.status_code == 200, answer.text
    assert all(isinstance(passed, Mapping) for passed in _usages_passed(answer.text)), answer.text
    assert '"code": "backend_failed"' in answer.text.splitlines()[-2], answer.text[-300:]
    outcomes = _settled(env, count + 1)
    assert outcomes[-1].status == "error"
    assert "charged as reserved" in " ".join(outcomes[-1].reasons), outcomes[-1]
    assert env.spent() == spent + RESERVED


def test_an_empty_usage_object_is_no_usage_as_in_a_whole_answer(env: Env, chattering: Chattering) -> None:
    """The rule's other side: ``{}`` is an object without counts, no usage reported, as a whole
    answer's ``{}`` is; the stream goes on and is charged the usage reported after it."""
    _in_service(env)
    chattering.script = _chunk("a") + _event_with_usage("{}") + _USAGE + _DONE
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
    assert answer.status_code == 200, answer.text
    assert answer.text.rstrip().endswith("data: [DONE]"), answer.text[-300:]
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 5
