"""Review R61 of the simulated backend's reading of integer fields.

vLLM reads a chat body with pydantic in lax mode (``ChatCompletionRequest``: ``n``, ``best_of``,
``max_tokens``, ``max_completion_tokens``, ``seed``, ``top_k``, ``top_logprobs`` are
``Optional[int]``), which takes a number with no fractional part (``1.0``, ``5.0``) as the integer
it is and refuses one with a fraction (``1.5``). The simulator refused ``n: 1.0`` and
``max_tokens: 5.0``, which vLLM serves, and served ``seed: 1.5``, ``top_k: -5`` or
``top_logprobs: 3`` without ``logprobs``, which vLLM refuses.
"""

from __future__ import annotations

import json

import _http
import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer
from agentgate.sim._request import ChatRequest, parse_chat

_CHAT: dict[str, object] = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}]}
_LIMIT = 4096


def _parse(**fields: object) -> ChatRequest:
    return parse_chat(json.dumps({**_CHAT, **fields}).encode(), _LIMIT)


@pytest.mark.parametrize(
    "fields",
    [
        {"n": 1.0},
        {"best_of": 1.0},
        {"max_tokens": 5.0},
        {"max_completion_tokens": 5.0},
        {"seed": 5.0},
        {"seed": -(2**63)},
        {"top_k": 5.0},
        {"top_k": -1},
        {"logprobs": True, "top_logprobs": 2.0},
        {"top_logprobs": 0},
    ],
    ids=repr,
)
def test_an_integer_written_with_a_zero_fraction_is_served_as_vllm_serves_it(
    fields: dict[str, object],
) -> None:
    """Review R61: ``n: 1.0`` and ``max_tokens: 5.0`` were a 400 ("Input should be a valid
    integer"); vLLM's lax pydantic reads them as 1 and 5."""
    request = _parse(**fields)
    tokens = fields.get("max_tokens", fields.get("max_completion_tokens"))
    if tokens is not None:
        assert request.max_tokens == int(tokens) and type(request.max_tokens) is int


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"n": 1.5}, "n"),
        ({"n": 2.0}, "n"),
        ({"best_of": 1.5}, "best_of"),
        ({"max_tokens": 5.5}, "max_tokens"),
        ({"max_tokens": 1e300}, "max_tokens"),
        ({"max_completion_tokens": 2.5}, "max_completion_tokens"),
        ({"seed": 1.5}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"seed": [1]}, "seed"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_k": -5}, "top_k"),
        ({"top_k": "x"}, "top_k"),
        ({"top_logprobs": -1, "logprobs": True}, "top_logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"logprobs": [True]}, "logprobs"),
    ],
    ids=repr,
)
def test_an_integer_field_vllm_refuses_is_an_input_error_naming_it(
    fields: dict[str, object], named: str
) -> None:
    """Review R61: a fractional integer, one outside vLLM's range (a seed beyond 64 bits, a
    ``top_k`` below -1, ``top_logprobs`` below 0 or above vLLM's default 20, or above 0 without
    ``logprobs``) is refused, as vLLM refuses it, naming the field; until R61 ``seed``,
    ``top_k`` and ``top_logprobs`` were not read at all and served whatever they held."""
    with pytest.raises(InputError, match=named):
        _parse(**fields)


def test_the_http_server_serves_n_one_point_zero() -> None:
    """Review R61: over HTTP, ``n: 1.0`` with ``max_tokens: 2.0`` is answered 200 with 2 tokens."""
    with SimServer(time_scale=0.001) as server, _http.Client(timeout=5.0) as http:
        answer = http.post(server.url + "/v1/chat/completions", json={**_CHAT, "n": 1.0, "max_tokens": 2.0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 2
