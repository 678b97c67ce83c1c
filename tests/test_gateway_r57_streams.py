"""The gateway's streamed answers against a backend that sends deltas without text, over real
HTTP on 127.0.0.1 (review R57): each test here failed on the code it was written against and
names what was wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

import pytest
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import (
    _SSE,
    RESERVED,
    Env,
    Hostile,
    _chunk,
    _gateway,
    _in_service,
    _json,
    _settled,
)

TICKS = 400
"""The most textless events the backend sends, one every ``TICK_S``: far longer than the gateway's
idle limit in these tests (0.8 s), so a backend that runs through them all was never cut."""
TICK_S = 0.05
TEXTLESS = {
    "tool_call_index_alone": b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}\n\n',
    "a_number_in_the_delta": b'data: {"choices":[{"index":0,"delta":{"content":"","x":1}}]}\n\n',
}


class Chattering(Hostile):
    """A backend whose streamed answer is, in mode ``chatter``, one chunk of text, then the event
    ``tick`` every ``TICK_S`` until the gateway closes the connection (``cut`` is set) or
    ``TICKS`` are sent; in mode ``script``, the bytes ``script`` after the head; in mode ``json``,
    the JSON answer ``json_answer`` to a call that is not streamed."""

    def __init__(self) -> None:
        super().__init__()
        self.tick = b""
        self.script = b""
        self.json_answer = b""
        self.cut = threading.Event()
        self.ran_out = threading.Event()

    @contextlib.contextmanager
    def answering(self, mode: str) -> Iterator[None]:
        """Answer in ``mode`` inside the block, then as a healthy backend (``ok``) again."""
        self.mode = mode
        try:
            yield
        finally:
            self.mode = "ok"

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode == "json" and not stream:
            w.write(_json(self.json_answer))
            return True
        if self.mode == "ok" or not stream:
            return await super()._answer(w, r, stream)
        if self.mode == "script":
            w.write(_SSE + self.script)
            await w.drain()
            return False
        w.write(_SSE + _chunk("x"))
        try:
            for _ in range(TICKS):
                await w.drain()
                if r.at_eof():
                    break
                w.write(self.tick)
                await asyncio.sleep(TICK_S)
            else:
                self.ran_out.set()
                return False
        except ConnectionError:
            pass
        self.cut.set()
        return False


@pytest.fixture(scope="module")
def chattering() -> Iterator[Chattering]:
    backend = Chattering()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, chattering: Chattering) -> Iterator[Env]:
    with _gateway(tmp_path_factory.mktemp("r57"), chattering) as made:
        yield made


@pytest.mark.parametrize("tick", sorted(TEXTLESS))
def test_a_stream_of_deltas_without_text_does_not_hold_the_call_past_its_idle_limit(
    env: Env, chattering: Chattering, tick: str
) -> None:
    """Review R57, a backend repeating a delta that holds no text held a streamed call for ever.

    Such a delta (``{"tool_calls": [{"index": 0}]}``, or a number beside empty content) counted as
    output, so each one pushed the stream's idle deadline out, while the answer limit counted
    none of its characters: a backend sending one every few seconds held the call, its backend
    slot and its reservation for as long as it went on. It is chatter now: the stream ends with
    an error event once the idle limit passes without text, charged its reservation.
    """
    _in_service(env)
    chattering.cut.clear()
    chattering.ran_out.clear()
    chattering.tick = TEXTLESS[tick]
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("chatter"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in answer.text and '"backend_failed"' in events[-1], answer.text[-300:]
    assert not chattering.ran_out.is_set(), "the backend's chatter held the call to its end"
    assert chattering.cut.wait(10), "the gateway did not close the backend's stream"
    outcomes = _settled(env, count + 1)
    assert outcomes[-1].status == "error" and outcomes[-1].reasons, outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []


_ZERO_USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0}}\n\n'
_WITH_ZERO_USAGE = (
    b'data: {"choices":[{"index":0,"delta":{"content":"a"}}],'
    b'"usage":{"prompt_tokens":0,"completion_tokens":0}}\n\n'
)
STALE_USAGE = {
    "usage_first_then_done": _ZERO_USAGE + _chunk("a") * 5 + b"data: [DONE]\n\n",
    "usage_first_then_break": _ZERO_USAGE + _chunk("a") * 5,
    "usage_with_the_first_chunk_then_break": _WITH_ZERO_USAGE + _chunk("b") * 5,
}


@pytest.mark.parametrize("script", sorted(STALE_USAGE))
def test_output_streamed_after_the_usage_reported_is_charged_its_reservation(
    env: Env, chattering: Chattering, script: str
) -> None:
    """Review R57, a stream whose usage came before its output was charged that usage: nothing.

    A backend that reported ``{"prompt_tokens": 0, "completion_tokens": 0}`` in its first event
    and then streamed its answer (ended by ``[DONE]`` or not) was charged zero for the answer it
    delivered. A usage counts the output sent with it and before it; output past the last one
    reported leaves the call's usage unread, charged as reserved.
    """
    _in_service(env)
    chattering.script = STALE_USAGE[script]
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    assert answer.text.count('"content":"a"') + answer.text.count('"content":"b"') >= 5, answer.text
    outcomes = _settled(env, count + 1)
    assert "charged as reserved" in " ".join(outcomes[-1].reasons), outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []


def test_a_usage_reported_after_the_output_is_what_is_charged(env: Env, chattering: Chattering) -> None:
    """The rule's other side (review R57): a usage sent with the last output or after it is the
    call's, however many were reported before it."""
    _in_service(env)
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n'
    chattering.script = _ZERO_USAGE + _chunk("a") * 5 + usage + b"data: [DONE]\n\n"
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]"), answer.text
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 7


_GOOD_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
_USAGE = {"prompt_tokens": 5, "completion_tokens": 2}
ODD_CHOICES = {
    "a_number": [_GOOD_CHOICE, 5],
    "a_string": [_GOOD_CHOICE, "junk"],
    "a_message_that_is_a_list": [_GOOD_CHOICE, {"index": 1, "message": ["hi"]}],
}


@pytest.mark.parametrize("odd", sorted(ODD_CHOICES))
def test_a_json_answer_with_a_choice_that_is_not_a_choice_is_a_backend_failure(
    env: Env, chattering: Chattering, odd: str
) -> None:
    """Review R57, a backend's answer whose second choice was not a choice reached the caller as a 200.

    Only the first choice was checked, and the gateway passes the backend's bytes on whole: the
    caller got ``"choices": [{...}, 5]``, which the OpenAI SDKs keep as ``5``, and its code failed
    on it. Such an answer is malformed: the call fails as a backend failure, nothing charged.
    """
    _in_service(env)
    chattering.json_answer = json.dumps({"id": "c", "choices": ODD_CHOICES[odd], "usage": _USAGE}).encode()
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code in (502, 503), (answer.status_code, answer.text)
    assert answer.json()["error"]["code"] in ("backend_failed", "no_backend"), answer.text
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent
    assert env.held() == []


@pytest.mark.parametrize("odd", ["5", '"junk"', '{"index":1,"delta":["x"]}'])
def test_a_streamed_event_with_a_choice_that_is_not_a_choice_ends_the_stream_in_an_error(
    env: Env, chattering: Chattering, odd: str
) -> None:
    """Review R57, a streamed event whose second choice was not a choice was passed on to the caller.

    After output, the stream ends with the error event instead, charged its reservation."""
    _in_service(env)
    event = b'data: {"choices":[{"index":0,"delta":{"content":"b"}},' + odd.encode() + b"]}\n\n"
    chattering.script = _chunk("a") + event + b"data: [DONE]\n\n"
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert '"backend_failed"' in events[-1] and '"b"' not in answer.text, answer.text
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent + RESERVED
    assert env.held() == []
