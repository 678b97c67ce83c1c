"""A streamed event nested deeper than the gateway can encode again, over real HTTP on 127.0.0.1
(review R88).

The stream reader (orjson) reads events nested up to 1,024 levels; the gateway wrote each one
again with Python's ``json``, which overflowed the stack near 1,000 levels: a ``RecursionError``
logged as an internal error, the stream ended with an ``internal_error`` event, and the call was
charged its whole reservation even when no output had gone out. A JSON answer so nested was
already a ``BackendFailed``, released. An event nested past ``MAX_DEPTH`` (254, what orjson
writes) is now a malformed event where the stream is read: before output the call fails over and
is released (502 ``backend_failed``), after output the stream ends with a ``backend_failed`` error
event and is charged its reservation, as for any backend failure after output.

The backend is ``test_gateway_r57_streams``'s ``Chattering``, which sends a scripted stream."""

from __future__ import annotations

import json
import logging

import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import RESERVED, Env, _chunk, _in_service, _settled
from test_gateway_r57_streams import Chattering

from agentgate._json import MAX_DEPTH
from agentgate.dispatch._sse import _parse_chunk
from agentgate.errors import BackendFailed

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env

_USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
_DONE = b"data: [DONE]\n\n"


def _nested(levels: int) -> str:
    """A JSON array ``levels`` deep (an empty one is one level)."""
    return "[" * levels + "]" * levels


def _event_with(delta: str, levels: int) -> bytes:
    """A stream event carrying ``delta`` and a field ``x`` nested so that the event itself is
    ``levels`` deep (the event object is one level)."""
    return f'data: {{"choices":[{{"index":0,"delta":{delta}}}],"x":{_nested(levels - 1)}}}\n\n'.encode()


def test_an_event_nested_past_the_bound_is_a_malformed_event() -> None:
    """Review R88: the stream reader took an event nested ~990 deep. It is refused now, naming
    the bound, and one exactly at the bound is read."""
    line = _event_with('{"content":"a"}', MAX_DEPTH + 1)[6:].decode().strip()
    with pytest.raises(BackendFailed, match=f"b: malformed stream event: .*more than {MAX_DEPTH} levels"):
        _parse_chunk("b", line)
    with pytest.raises(BackendFailed, match="malformed stream event"):
        _parse_chunk("b", _event_with('{"content":"a"}', 990)[6:].decode().strip())
    chunk = _parse_chunk("b", _event_with('{"content":"a"}', MAX_DEPTH)[6:].decode().strip())
    assert chunk is not None and chunk.content == "a"


def test_a_deep_event_before_output_is_released(
    env: Env, chattering: Chattering, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R88: a first, role-only event nested 990 deep made the gateway answer 200, then an
    ``internal_error`` event, and charge the reservation. It is a backend failure before output
    now: 502 ``backend_failed`` (or 503 ``no_backend``), nothing charged, no internal error logged."""
    caplog.set_level(logging.ERROR)
    _in_service(env)
    chattering.script = _event_with('{"role":"assistant"}', 990) + _chunk("hi") + _USAGE + _DONE
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    # The one backend failed every attempt: the gateway answers backend_failed, or no_backend once
    # the router, having seen it fail, waits no more for it (which of the two is timing's).
    assert (answer.status_code, answer.json()["error"]["code"]) in (
        (502, "backend_failed"),
        (503, "no_backend"),
    ), answer.text[-300:]
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent
    assert env.held() == []
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text[-500:]


def test_a_deep_event_after_output_ends_the_stream_as_a_backend_failure(
    env: Env, chattering: Chattering, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R88: after output, the same event ended the stream with ``internal_error`` and a
    traceback in the log. It ends with a ``backend_failed`` error event now, charged its
    reservation as a stream broken after output is."""
    caplog.set_level(logging.ERROR)
    _in_service(env)
    chattering.script = _chunk("hi") + _event_with('{"content":" there"}', 990) + _USAGE + _DONE
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[-1][6:])["error"]["code"] == "backend_failed", answer.text[-300:]
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent + RESERVED
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text[-500:]


def test_an_event_at_the_bound_is_passed_on_whole(env: Env, chattering: Chattering) -> None:
    """The rule's other side: an event nested exactly ``MAX_DEPTH`` deep is read, and the gateway
    encodes it again and passes it on, its deep field as sent."""
    _in_service(env)
    chattering.script = _event_with('{"content":"a"}', MAX_DEPTH) + _USAGE + _DONE
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text[-300:]
    assert answer.text.rstrip().endswith("data: [DONE]"), answer.text[-300:]
    assert _nested(MAX_DEPTH - 1) in answer.text
