"""The gateway's charge for a backend's usage that cannot be the call's, over real HTTP on
127.0.0.1 (review R66): a usage counting fewer output tokens than the answer it came with, or
fewer tokens than the same stream reported before it. Each test failed on the code it was
written against and names what was wrong.

The backend is ``test_gateway_r57_streams``'s ``Chattering``, which sends a scripted stream or
a given JSON answer."""

from __future__ import annotations

import json

import pytest
import test_gateway_r57_streams
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import RESERVED, Env, _chunk, _in_service, _settled
from test_gateway_r57_charges import _tokens_counted
from test_gateway_r57_streams import Chattering

chattering = test_gateway_r57_streams.chattering  # the fixtures, shared: a module's own instances
env = test_gateway_r57_streams.env


def _usage(prompt: int, completion: int) -> bytes:
    event = {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


_DONE = b"data: [DONE]\n\n"
UNCOUNTED = {
    # Five characters of answer, then a usage of no output token: the answer went free.
    "no_output_token_for_the_answer": _chunk("a") * 5 + _usage(3, 0) + _DONE,
    # 2,000 characters in one token: more than any token decodes to (MAX_CHARS_PER_TOKEN).
    "one_token_for_2000_characters": _chunk("a" * 1000) * 2 + _usage(3, 1) + _DONE,
    # The usage said again, lower: the last one reported was charged.
    "a_usage_said_again_lower": _chunk("a") * 5 + _usage(3, 5) + _usage(3, 1) + _DONE,
    "a_prompt_said_again_lower": _chunk("a") * 5 + _usage(3, 5) + _usage(0, 5) + _DONE,
}


@pytest.mark.parametrize("script", sorted(UNCOUNTED))
def test_a_streamed_usage_that_cannot_count_the_answer_is_charged_the_reservation(
    env: Env, chattering: Chattering, script: str
) -> None:
    """Review R66: a stream's last usage was charged whatever it said of the answer it ended.

    A backend that streamed five characters and then reported ``completion_tokens: 0`` (or one
    token for 2,000 characters, or its usage a second time, lower than the first) was charged
    that usage: the answer went (nearly) free. Such a usage cannot be the call's: its usage is
    unread, and it is charged its reservation, as a stream with no usage is; the answer itself
    is passed on whole."""
    _in_service(env)
    chattering.script = UNCOUNTED[script]
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]"), answer.text[-300:]
    outcomes = _settled(env, count + 1)
    assert "charged as reserved" in " ".join(outcomes[-1].reasons), outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []


def test_a_usage_said_again_higher_is_charged(env: Env, chattering: Chattering) -> None:
    """The rule's other side: a usage said again, as high or higher (vLLM's continuous usage),
    and one that counts the answer it came with, is charged as reported."""
    _in_service(env)
    chattering.script = _usage(3, 0) + _chunk("a") * 5 + _usage(3, 2) + _usage(3, 4) + _DONE
    spent, count = env.spent(), len(env.outcomes())
    with chattering.answering("script"):
        answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 7


def _answer(content: str, completion: int) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 3, "completion_tokens": completion}
    return json.dumps({"id": "c", "object": "chat.completion", "choices": [choice], "usage": usage}).encode()


@pytest.mark.parametrize(
    ("content", "completion"), [("hello", 0), ("a" * 2000, 1)], ids=["no-token", "one-token-for-2000"]
)
def test_a_json_answer_whose_usage_cannot_count_it_is_charged_the_reservation(
    env: Env, chattering: Chattering, content: str, completion: int
) -> None:
    """Review R66: a JSON answer's usage was charged whatever it said of the answer: ``hello``
    with ``completion_tokens: 0`` was charged its prompt only. It is charged its reservation,
    as an answer with no usage is; the answer itself is passed on. Nor does the gateway's token
    counter count that usage (as it counts none a stream's charge did not read)."""
    _in_service(env)
    chattering.json_answer = _answer(content, completion)
    spent, count, counted = env.spent(), len(env.outcomes()), _tokens_counted(env)
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == content
    outcomes = _settled(env, count + 1)
    assert "charged as reserved" in " ".join(outcomes[-1].reasons), outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []
    assert _tokens_counted(env) == counted


def test_a_json_answer_whose_usage_counts_it_is_charged_that_usage(env: Env, chattering: Chattering) -> None:
    """The rule's other side: an answer's usage that can count it is what is charged."""
    _in_service(env)
    chattering.json_answer = _answer("hello", 2)
    spent, count, counted = env.spent(), len(env.outcomes()), _tokens_counted(env)
    with chattering.answering("json"):
        answer = env.post(_body())
    assert answer.status_code == 200, answer.text
    assert _settled(env, count + 1)[-1].status == "ok"
    assert env.spent() == spent + 5
    now = _tokens_counted(env)
    assert (now["prompt"] - counted.get("prompt", 0), now["completion"] - counted.get("completion", 0)) == (
        3,
        2,
    )
