"""The gateway's streaming path against hostile backends and callers (review R62's pass), over
real HTTP on 127.0.0.1: a caller that hangs up mid-stream, a backend whose first event is a
10 MB ``data:`` line, a backend that ends a complete-looking stream without ``[DONE]``.

The hostile backend is ``test_gateway_hostile_backends``'s, with the modes these tests need."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import _http
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

from agentgate.dispatch.gateway import invocation_headers

_FINISH = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
_USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}\n\n'


class _Streams(Hostile):
    """``Hostile`` with three more streamed modes: ``endless`` (a chunk every 20 ms until the
    gateway closes the connection, which sets ``cut``), ``huge_first`` (a 10 MB ``data:`` line
    before any output), ``no_done`` (output, finish, usage, then the connection closed without
    ``[DONE]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = asyncio.Event()
        self.streams = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode == "endless":
            self.streams += 1
            w.write(_SSE)
            try:
                for _ in range(3000):
                    w.write(_chunk("x"))
                    await w.drain()
                    await asyncio.sleep(0.02)
            except ConnectionError:
                self.cut.set()
            return False
        if self.mode == "huge_first":
            w.write(_SSE + b"data: " + b"x" * (10 * 1024 * 1024) + b"\n\n")
            await w.drain()
            return False
        if self.mode == "no_done":
            w.write(_SSE + _chunk("a") * 4 + _FINISH + _USAGE)
            await w.drain()
            return False
        return await super()._answer(w, r, stream)


@pytest.fixture(scope="module")
def streams() -> Iterator[_Streams]:
    backend = _Streams()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, streams: _Streams) -> Iterator[Env]:
    with _gateway(tmp_path_factory.mktemp("r62"), streams) as made:
        yield made


def test_a_caller_gone_mid_stream_cuts_the_backend_request_and_settles_once(
    env: Env, streams: _Streams
) -> None:
    """Review R62: a caller that hangs up after the first chunks has its backend request cut
    (the backend sees its connection closed) and the call settled once, charged its
    reservation (what the backend generated meanwhile cannot be read); nothing stays held."""
    _in_service(env)
    streams.mode = "endless"
    streams.cut.clear()
    spent, count = env.spent(), len(env.outcomes())
    body = _body(stream=True)
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    with _http.stream("POST", env.url, json=body, headers=headers, timeout=20) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
    deadline = time.monotonic() + 10
    while not streams.cut.is_set():
        assert time.monotonic() < deadline, "the backend request was not cut"
        time.sleep(0.02)
    outcomes = _settled(env, count + 1)
    time.sleep(0.3)  # a second settlement would land meanwhile
    assert len(env.outcomes()) == count + 1, env.outcomes()[count:]
    assert outcomes[-1].status == "error", outcomes[-1]
    assert env.spent() == spent + RESERVED
    assert env.held() == []
    assert streams.streams == 1, "the cut call was sent again"
    streams.streams = 0


def test_a_10_mb_data_line_before_any_output_is_a_502_with_nothing_charged(
    env: Env, streams: _Streams
) -> None:
    """Review R62: a first event of 10 MB is not read whole: the call is a 502 ``backend_failed``
    in OpenAI's shape, released (nothing charged, nothing held), audited as an error."""
    _in_service(env)
    streams.mode = "huge_first"
    spent, count = env.spent(), len(env.outcomes())
    answer = env.post(_body(stream=True))
    assert answer.status_code in (502, 503), answer.text[:300]
    assert answer.json()["error"]["code"] in ("backend_failed", "no_backend")
    outcomes = _settled(env, count + 1)
    assert outcomes[-1].status == "error", outcomes[-1]
    assert env.spent() == spent
    assert env.held() == []


def test_a_stream_closed_without_done_ends_with_an_error_event(env: Env, streams: _Streams) -> None:
    """Review R62: a backend that sends output, a finish and its usage, then closes without
    ``[DONE]`` has not ended its stream as vLLM ends one (its answer may be cut): the caller's
    stream ends with an error event, not ``[DONE]``, and the call is settled once, never charged
    less than the usage the backend reported."""
    _in_service(env)
    streams.mode = "no_done"
    spent, count = env.spent(), len(env.outcomes())
    answer = env.post(_body(stream=True))
    assert answer.status_code == 200
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in answer.text, answer.text[-300:]
    assert json.loads(events[-1][len("data: ") :])["error"]["code"] == "backend_failed", events[-1]
    _settled(env, count + 1)
    assert len(env.outcomes()) == count + 1
    assert env.spent() >= spent + 5 + 4
    assert env.held() == []
