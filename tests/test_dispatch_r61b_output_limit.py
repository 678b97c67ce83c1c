"""Review R61: one reader of a call's output limit (``max_completion_tokens``, else
``max_tokens``) for the router, a non-streamed answer's deadline and a stream's answer bound.

Until review R61 they disagreed: ``Dispatcher.route_request`` read ``int()`` of the value
(``5.5`` as 5, ``"100"`` as 100, ``true`` as 1) while ``Timeouts.answer_s`` and the stream's
answer bound took those values as no limit, so a stream with ``max_tokens: "100"`` was routed
for 100 tokens and streamed with no bound on its characters. Now each reads ``output_limit``:
an integer, or a float with no fractional part (as vLLM's lax pydantic reads it); anything else
is a ``DispatchError`` naming the field, before anything is sent. Real HTTP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import _http
import pytest
from test_dispatch_r61_backend_garbage import _DONE, _SSE, NAME, PAYLOAD, Garbage, _chunk, dispatcher_of

from agentgate.dispatch.backends import (
    MAX_CHARS_PER_TOKEN,
    MAX_USAGE_TOKENS,
    BackendClient,
    Timeouts,
    output_limit,
)
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import BackendFailed, DispatchError

REFUSED: list[object] = ["100", "5", 5.5, True, False, -3, -2.0, 1e300, float("inf"), float("nan"), [5], {}]
"""Values of an output limit that are no whole number of tokens from 0 up."""


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


def test_the_output_limit_is_an_integer_or_a_float_with_no_fraction() -> None:
    """Review R61: ``output_limit`` reads 5 and 5.0 as 5, ``max_completion_tokens`` before
    ``max_tokens`` (absent, null or 0 names none, as vLLM's ``or`` reads them), and nothing
    named as ``None``."""
    assert output_limit({"max_tokens": 5}) == output_limit({"max_tokens": 5.0}) == 5
    assert output_limit({"max_completion_tokens": 2.0, "max_tokens": 9}) == 2
    assert output_limit({"max_completion_tokens": None, "max_tokens": 9}) == 9
    assert output_limit({"max_completion_tokens": 0, "max_tokens": 9}) == 9
    assert output_limit({}) is None
    assert output_limit({"max_tokens": 0}) is None
    assert output_limit({"max_tokens": MAX_USAGE_TOKENS}) == MAX_USAGE_TOKENS


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_an_output_limit_that_is_no_whole_number_is_refused_naming_its_field(
    field: str, value: object
) -> None:
    """Review R61: text, a bool, a fraction, a negative, an infinite or huge number is a
    ``DispatchError`` that names the field, from every reader: the router's, the non-streamed
    deadline's and the stream's bound (until review R61 ``answer_s`` and the stream bound took
    them as no limit, and the router as ``int()`` of them)."""
    payload = {**PAYLOAD, "max_tokens": 10, field: value}
    with pytest.raises(DispatchError, match=f"^{field} must be a whole number") as caught:
        output_limit(payload)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
    with pytest.raises(DispatchError, match=f"^{field} must be a whole number"):
        Timeouts().answer_s(payload)


def test_a_valid_max_completion_tokens_does_not_hide_an_invalid_max_tokens() -> None:
    """Review R61: both fields are read, as vLLM validates both: ``max_tokens: "x"`` beside a
    valid ``max_completion_tokens`` is refused, naming ``max_tokens``."""
    with pytest.raises(DispatchError, match=r"^max_tokens must be a whole number"):
        output_limit({"max_completion_tokens": 5, "max_tokens": "x"})


def test_a_long_refused_value_is_quoted_short() -> None:
    """Review R61: a megabyte of text given as ``max_tokens`` is quoted cut, not whole."""
    with pytest.raises(DispatchError) as caught:
        output_limit({"max_tokens": "9" * 1_000_000})
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("value", ["100", 5.5, True])
async def test_the_dispatcher_refuses_a_stream_whose_max_tokens_is_no_whole_number(
    garbage: Garbage, value: object
) -> None:
    """Review R61: a stream with ``max_tokens: "100"`` was routed for 100 tokens and then streamed
    with no bound on its characters (10,000 here, for a backend that ignores the limit); it is
    now refused before any backend is asked, and the router holds nothing for it."""
    garbage.reply = _SSE + b"".join(_chunk("x" * 1000) for _ in range(200)) + _DONE
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(DispatchError, match=r"^max_tokens must be a whole number"):
            async for _ in dispatcher.stream({**PAYLOAD, "max_tokens": value, "stream": True}):
                pass
        assert router.states[NAME].in_flight == 0
    assert garbage.asked == 0


async def test_a_stream_of_max_tokens_a_whole_float_is_bounded_as_its_integer(garbage: Garbage) -> None:
    """Review R61: ``max_tokens: 2.0`` routes and bounds the stream as 2 does: a backend that
    ignores it is cut past 2 * ``MAX_CHARS_PER_TOKEN`` characters."""
    garbage.reply = _SSE + b"".join(_chunk("x" * 1000) for _ in range(10)) + _DONE
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"over {2 * MAX_CHARS_PER_TOKEN} characters"):
            async for _ in dispatcher.stream({**PAYLOAD, "max_tokens": 2.0, "stream": True}):
                pass
        assert router.states[NAME].in_flight == 0


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_backend_client_refuses_a_max_tokens_that_is_no_whole_number(
    garbage: Garbage, streamed: bool
) -> None:
    """Review R61: ``BackendClient`` called directly (no router before it) refuses
    ``max_tokens: "100"`` as the router does, and sends nothing."""
    garbage.reply = _SSE + b"".join(_chunk("x" * 1000) for _ in range(200)) + _DONE
    backend = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
    ).backends[0]
    payload = {**PAYLOAD, "max_tokens": "100"}
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http, Timeouts(first_token_s=2, idle_s=0.5))
        with pytest.raises(DispatchError, match=r"^max_tokens must be a whole number"):
            if streamed:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    assert garbage.asked == 0
