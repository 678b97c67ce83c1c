"""Review R66: a chat body naming an output limit the gateway does not read is refused.

llama.cpp's server reads ``n_predict`` before ``max_tokens`` on its OpenAI chat route (its
``oaicompat_chat_params_parse`` copies ``n_predict`` over the limit it took from ``max_tokens``),
so a body with ``max_tokens: 8`` and ``n_predict: 100000`` (or ``-1``, no limit) was signed,
reserved and capped at 8 tokens by the gateway, and generated up to 100,000 by a ``llamacpp``
backend: charged at most the 8 reserved (a reported usage over ``max_tokens`` is charged
``max_tokens``). Over real HTTP on 127.0.0.1, with the hostile backend of
``test_gateway_hostile_backends``, which counts the calls it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, Hostile, _gateway, _in_service, _settled


class _Counting(Hostile):
    """``Hostile``, counting the chat calls it answers (``asked``)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.asked += 1
        return await super()._answer(w, r, stream)


@pytest.fixture(scope="module")
def counting() -> Iterator[_Counting]:
    backend = _Counting()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, counting: _Counting) -> Iterator[Env]:
    with _gateway(tmp_path_factory.mktemp("r66-limits"), counting) as made:
        yield made


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("value", [100_000, -1, 8, None])
def test_a_body_with_n_predict_is_refused_before_it_is_decided(
    env: Env, counting: _Counting, value: Any, stream: bool
) -> None:
    """Review R66: ``n_predict`` (llama.cpp's output limit, read over ``max_tokens``) in a chat
    body is refused 400 naming it, whatever its value: nothing decided, sent or charged."""
    _in_service(env)
    spent, count, asked = env.spent(), len(env.outcomes()), counting.asked
    answer = env.post({**_body(stream=stream), "n_predict": value})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "n_predict" and "max_tokens" in error["message"], error
    assert counting.asked == asked, "the call was sent to the backend"
    assert env.spent() == spent and env.held() == []
    assert len(env.outcomes()) == count


@pytest.mark.parametrize("value", [4, 2.0, "2", True])
def test_a_body_asking_for_several_completions_by_n_cmpl_is_refused(
    env: Env, counting: _Counting, value: Any
) -> None:
    """Review R66: ``n_cmpl`` (llama.cpp's count of completions, of which ``n`` is its alias)
    other than 1 was passed on: several completions generated for the one signed and reserved
    (``n`` and ``best_of`` were refused already). Refused 400 naming it, nothing sent."""
    _in_service(env)
    spent, asked = env.spent(), counting.asked
    answer = env.post({**_body(), "n_cmpl": value})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "n_cmpl", answer.text
    assert counting.asked == asked and env.spent() == spent


@pytest.mark.parametrize("value", [1, 1.0, None])
def test_n_cmpl_of_one_is_served(env: Env, counting: _Counting, value: Any) -> None:
    """The rule's other side: ``n_cmpl`` of one (or null) is one choice, as ``n`` of one is."""
    _in_service(env)
    asked = counting.asked
    answer = env.post({**_body(), "n_cmpl": value})
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1


def test_a_body_without_it_is_served(env: Env, counting: _Counting) -> None:
    """The rule's other side: the same body without ``n_predict`` is sent and answered."""
    _in_service(env)
    count, asked = len(env.outcomes()), counting.asked
    answer = env.post(_body())
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1
    assert _settled(env, count + 1)[-1].status == "ok"
