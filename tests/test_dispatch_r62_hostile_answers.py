"""Review R62 of hostile answers from a backend: many choices, a huge finish reason, 2**63 tokens.

A non-streamed answer of 100,000 choices to a call that asked for one, and a ``finish_reason`` of
1 MB (whole or streamed), were taken as answers: the reason was passed on, logged and recorded as
it came. Each is now a ``BackendFailed`` naming the backend, its message bounded, and a gated
call's reservation is settled once, charging nothing. A usage of 2**63 tokens was refused
already; it is kept here with the others.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_dispatch_r61_backend_garbage import (
    _DONE,
    NAME,
    PAYLOAD,
    Garbage,
    _chunk,
    _whole,
    dispatcher_of,
    gated_call_charges_nothing,
)
from test_gateway_hostile_backends import _SSE

from agentgate.errors import BackendFailed

pytest_plugins = ["test_dispatch_r61_backend_garbage"]  # its ``garbage`` fixture


def _choice(i: int, reason: str = "stop") -> dict[str, object]:
    return {"index": i, "message": {"role": "assistant", "content": "hi"}, "finish_reason": reason}


WHOLE: dict[str, bytes] = {
    "choices_100000": _whole(choices=[_choice(i) for i in range(100_000)]),
    "choices_2_for_1": _whole(choices=[_choice(0), _choice(1)]),
    "finish_reason_1mb": _whole(choices=[_choice(0, "x" * 1_000_000)]),
    "finish_reason_control": _whole(choices=[_choice(0, "stop\x1b[2J")]),
    "usage_2_63": _whole(usage={"prompt_tokens": 5, "completion_tokens": 2**63}),
}

STREAMED: dict[str, bytes] = {
    "finish_reason_1mb": _SSE
    + _chunk("hi")
    + b"data: "
    + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "x" * 1_000_000}]}).encode()
    + b"\n\n"
    + _DONE,
    "usage_2_63": _SSE
    + _chunk("hi")
    + b"data: "
    + json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2**63}}).encode()
    + b"\n\n"
    + _DONE,
}


@pytest.mark.parametrize("case", sorted(WHOLE))
async def test_a_hostile_whole_answer_is_backend_failed_naming_the_backend(
    garbage: Garbage, case: str
) -> None:
    """Review R62: 100,000 choices (or 2) for a call of one, a finish reason of 1 MB or with an
    escape, 2**63 completion tokens: each a ``BackendFailed`` naming the backend, bounded, and
    nothing held in flight."""
    garbage.reply = WHOLE[case]
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"{NAME}: ") as caught:
            await dispatcher.chat(PAYLOAD)
        assert router.states[NAME].in_flight == 0
    assert len(str(caught.value)) < 1000 and str(caught.value).isprintable()


async def test_an_answer_with_the_choices_the_call_asked_for_is_taken(garbage: Garbage) -> None:
    """Review R62: a call of ``n`` 2 answered with 2 choices is an answer (its first is read).
    Sent by the backend's client: since review R84 the dispatcher refuses ``n`` other than 1."""
    garbage.reply = _whole(choices=[_choice(0), _choice(1, "length")])
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        result = await dispatcher.clients[NAME].chat({**PAYLOAD, "n": 2})
    assert (result.content, result.finish_reason) == ("hi", "stop")


@pytest.mark.parametrize("case", sorted(STREAMED))
async def test_a_hostile_stream_is_backend_failed_naming_the_backend(garbage: Garbage, case: str) -> None:
    """Review R62: a streamed finish reason of 1 MB (passed on as it came) and 2**63 completion
    tokens end the stream in a ``BackendFailed`` naming the backend, bounded."""
    garbage.reply = STREAMED[case]
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"{NAME}: ") as caught:
            async for chunk in dispatcher.stream({**PAYLOAD, "stream": True}):
                assert chunk.finish_reason is None or len(chunk.finish_reason) < 100
        assert router.states[NAME].in_flight == 0
    assert len(str(caught.value)) < 1000 and str(caught.value).isprintable()


@pytest.mark.parametrize("case", ["choices_100000", "finish_reason_1mb"])
def test_a_gated_call_answered_with_a_hostile_answer_is_settled_once_charging_nothing(
    tmp_path: Path, garbage: Garbage, case: str
) -> None:
    """Review R62: through ``Gate.run`` of ``Gate.dispatch``, such an answer is a
    ``BackendFailed`` and the call's reservation is released once: nothing charged."""
    garbage.reply = WHOLE[case]
    gated_call_charges_nothing(tmp_path, garbage)
