"""Review R87b: ``Engine.add`` refusing a request whose prompt and output need more KV than the
cache holds put each count where a number reads, and a count past 128 bits read as
``an integer of 1329 bits prompt and 4 output tokens need an integer of 1329 bits tokens of KV``.
It now says what each count is before it, and a count past 128 bits as a number of tokens so many
bits long (a count of more than 4,300 digits has no ``str``)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, SimRequest


def _refusal(prompt: int, output: int) -> str:
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError) as refused:
        engine.add(SimRequest("a", prompt, output))
    assert not engine.has_work()
    return str(refused.value)


def test_a_request_past_the_cache_says_each_count_and_what_it_needs() -> None:
    capacity = Engine(LLAMA_8B_H100).kv.capacity
    assert _refusal(capacity, 4) == (
        f"request 'a': a prompt of {capacity} tokens and an output of 4 tokens need {capacity + 3} tokens of KV, "
        f"more than the cache holds ({capacity} tokens)"
    )


@pytest.mark.parametrize(
    ("prompt", "output", "counts"),
    [
        (10**400, 4, "a prompt of a number of tokens 1329 bits long and an output of 4 tokens"),
        (100, 10**5000, "a prompt of 100 tokens and an output of a number of tokens 16610 bits long"),
    ],
    ids=["prompt", "output"],
)
def test_a_count_past_128_bits_reads_as_a_count_of_that_size(prompt: int, output: int, counts: str) -> None:
    capacity = Engine(LLAMA_8B_H100).kv.capacity
    assert _refusal(prompt, output) == (
        f"request 'a': {counts} need more KV than the cache holds ({capacity} tokens)"
    )


def test_a_negative_prompt_past_128_bits_keeps_its_sign() -> None:
    assert _refusal(-(10**400), 4) == (
        "request 'a': a prompt of a negative number of tokens 1329 bits long (an empty prompt cannot be served)"
    )
