"""Review R61: a stream's answer limit for an output limit written as a float.

vLLM reads ``max_tokens: 5.0`` as 5 (pydantic in lax mode) and honours it, and so does the
simulator since review R61; the dispatcher took only an ``int`` for the stream's character bound
(``MAX_CHARS_PER_TOKEN`` a token), so a call of ``max_tokens: 1.0`` to a backend that ignores it
was streamed without any bound. Real HTTP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_dispatch_r61_backend_garbage import _DONE, _SSE, NAME, PAYLOAD, Garbage, _chunk, dispatcher_of

from agentgate.dispatch._sse import MAX_CHARS_PER_TOKEN, _answer_limit
from agentgate.errors import BackendFailed, DispatchError


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


def test_the_answer_limit_reads_an_integral_float_as_its_integer() -> None:
    """Review R61: ``max_tokens`` 5.0 bounds a stream as 5 does; nothing (or 0) leaves it to the
    backend; a fraction, a bool or text is refused (``output_limit``, tests/test_dispatch_r61b_output_limit.py)."""
    assert _answer_limit({"max_tokens": 5.0}) == _answer_limit({"max_tokens": 5}) == 5 * MAX_CHARS_PER_TOKEN
    assert _answer_limit({"max_completion_tokens": 2.0, "max_tokens": 9}) == 2 * MAX_CHARS_PER_TOKEN
    for value in (None, 0):
        assert _answer_limit({"max_tokens": value}) is None, value
    for value in (-3.0, 5.5, True, "5", float("inf"), float("nan"), 1e300):
        with pytest.raises(DispatchError, match=r"^max_tokens must be a whole number"):
            _answer_limit({"max_tokens": value})


async def test_a_backend_ignoring_a_float_max_tokens_is_cut_at_the_answer_limit(garbage: Garbage) -> None:
    """Review R61: for ``max_tokens: 1.0`` a backend that streams 10,000 characters (and then
    ``[DONE]``) was passed through whole; it fails, naming the backend, once past 1,024."""
    garbage.reply = _SSE + b"".join(_chunk("x" * 1000) for _ in range(10)) + _DONE
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"{NAME}: streamed over 1024 characters"):
            async for _ in dispatcher.stream({**PAYLOAD, "max_tokens": 1.0, "stream": True}):
                pass
        assert router.states[NAME].in_flight == 0
