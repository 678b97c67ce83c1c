"""The gateway's streamed answers against a backend that sends deltas without text, over real
HTTP on 127.0.0.1 (review R57): each test here failed on the code it was written against and
names what was wrong.
"""

from __future__ import annotations

import asyncio
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
    """A backend whose streamed answer is one chunk of text, then the event ``tick`` every
    ``TICK_S`` until the gateway closes the connection (``cut`` is set) or ``TICKS`` are sent."""

    def __init__(self) -> None:
        super().__init__()
        self.tick = b""
        self.cut = threading.Event()
        self.ran_out = threading.Event()

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode == "ok" or not stream:
            return await super()._answer(w, r, stream)
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
    chattering.mode = "chatter"
    spent, count = env.spent(), len(env.outcomes())
    try:
        answer = env.post(_body(stream=True))
    finally:
        chattering.mode = "ok"
    assert answer.status_code == 200, answer.text
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in answer.text and '"backend_failed"' in events[-1], answer.text[-300:]
    assert not chattering.ran_out.is_set(), "the backend's chatter held the call to its end"
    assert chattering.cut.wait(10), "the gateway did not close the backend's stream"
    outcomes = _settled(env, count + 1)
    assert outcomes[-1].status == "error" and outcomes[-1].reasons, outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []
