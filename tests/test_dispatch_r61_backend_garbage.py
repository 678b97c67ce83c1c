"""Review R61, hostile pass: garbage from a backend, through the dispatcher (not the gateway).

A backend on 127.0.0.1 answers each call with one kind of garbage: an SSE ``data:`` line of
10 MB, a stream that never sends ``[DONE]`` (closed, or held open), usage counts that are
negative, 2**70 or text, ``choices`` that is not a list, HTTP 200 with an HTML body. Each call
must end in ``BackendFailed`` naming the backend, the router holding nothing in flight for it
after (its slot released), and, through a ``Gate``, nothing charged beyond the reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_gate_run import Setup
from test_gateway_hostile_backends import _SSE, Hostile, _chunk, _head, _json

from agentgate import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed

NAME = "junk"
TIMEOUTS = Timeouts(connect_s=2, first_token_s=2, idle_s=0.3, answer_max_s=2)
PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}
_DONE = b"data: [DONE]\n\n"
_HTML = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"


def _whole(usage: object = None, choices: object = None) -> bytes:
    body: dict[str, object] = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]
        if choices is None
        else choices,
        "usage": {"prompt_tokens": 5, "completion_tokens": 2} if usage is None else usage,
    }
    return _json(json.dumps(body).encode())


def _usage_event(usage: object) -> bytes:
    return b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"


BAD_USAGE: list[object] = [
    {"prompt_tokens": -1, "completion_tokens": 2},
    {"prompt_tokens": 5, "completion_tokens": 2**70},
    {"prompt_tokens": "5", "completion_tokens": 2},
]

WHOLE: dict[str, bytes] = {
    "usage_negative": _whole(usage=BAD_USAGE[0]),
    "usage_2_70": _whole(usage=BAD_USAGE[1]),
    "usage_text": _whole(usage=BAD_USAGE[2]),
    "choices_object": _whole(choices={"0": {"message": {"content": "hi"}}}),
    "choices_text": _whole(choices="hi"),
    "html_200": _json(_HTML, ctype="text/html"),
}
"""Non-streamed answers, each sent whole with its ``Content-Length``."""

STREAMED: dict[str, bytes] = {
    "usage_negative": _SSE + _chunk("hi") + _usage_event(BAD_USAGE[0]) + _DONE,
    "usage_2_70": _SSE + _chunk("hi") + _usage_event(BAD_USAGE[1]) + _DONE,
    "usage_text": _SSE + _chunk("hi") + _usage_event(BAD_USAGE[2]) + _DONE,
    "choices_object": _SSE + b'data: {"choices": {"0": {"delta": {"content": "hi"}}}}\n\n' + _DONE,
    "no_done_closed": _SSE + _chunk("hi"),
    "html_200": _head("200 OK", {"content-type": "text/html", "connection": "close"}) + _HTML,
}
"""Streamed answers, each followed by the connection's close."""


class Garbage(Hostile):
    """Answers a call with ``reply`` (then closes the connection), or in mode ``held`` with the
    stream's head and one chunk and then nothing, the connection held open; in mode ``huge``
    with an SSE ``data:`` line of 10 MB. ``asked`` counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.reply = b""
        self.asked = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.asked += 1
        with contextlib.suppress(ConnectionError):
            if self.mode == "held":
                w.write(_SSE + _chunk("hi"))
                await w.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(r.read(), 30)
            elif self.mode == "huge":
                w.write(_SSE + b"data: ")
                for _ in range(10):
                    w.write(b"x" * (1 << 20))
                    await w.drain()
                w.write(b"\n\n" + _DONE)
                await w.drain()
            else:
                w.write(self.reply)
                await w.drain()
        return False


AFTER_OUTPUT = frozenset({"usage_negative", "usage_2_70", "usage_text", "no_done_closed", "held"})
"""The garbage streams that deliver output ("hi") before they go wrong."""


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


@contextlib.asynccontextmanager
async def dispatcher_of(url: str) -> AsyncIterator[tuple[Dispatcher, Router]]:
    inventory = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": url, "engine": "vllm", "models": ["small"]}]}
    )
    router = Router(inventory)
    async with Dispatcher(inventory, router, timeouts=TIMEOUTS, max_attempts=1, slo_ttft_s=30) as dispatcher:
        yield dispatcher, router


@pytest.mark.parametrize("case", sorted(WHOLE))
async def test_a_non_streamed_garbage_answer_is_backend_failed_naming_the_backend(
    garbage: Garbage, case: str
) -> None:
    """Review R61: each garbage answer to ``Dispatcher.chat`` is a ``BackendFailed`` that names
    the backend, and the router holds nothing in flight for it after."""
    garbage.reply = WHOLE[case]
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"{NAME}: ") as caught:
            await dispatcher.chat(PAYLOAD)
        assert router.states[NAME].in_flight == 0
    assert len(str(caught.value)) < 2000 and garbage.asked == 1


@pytest.mark.parametrize("case", [*sorted(STREAMED), "held", "huge"])
async def test_a_streamed_garbage_answer_is_backend_failed_naming_the_backend(
    garbage: Garbage, case: str
) -> None:
    """Review R61: each garbage stream (a 10 MB line, no ``[DONE]`` whether closed or held open,
    bad usage, ``choices`` not a list, an HTML page) read through ``Dispatcher.stream`` ends in a
    ``BackendFailed`` that names the backend, and the router holds nothing in flight for it."""
    if case in STREAMED:
        garbage.reply = STREAMED[case]
    else:
        garbage.mode = case
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        with pytest.raises(BackendFailed, match=f"{NAME}: ") as caught:
            async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                pass
        assert router.states[NAME].in_flight == 0
    assert len(str(caught.value)) < 2000


@pytest.mark.parametrize(
    ("stream", "case"),
    [
        # A whole answer with garbage usage ran: charged its reservation since review R68
        # (tests/test_dispatch_r68_usage_garbage.py).
        *((False, c) for c in sorted(WHOLE) if not c.startswith("usage_")),
        # A stream cut after its output ("hi") is charged its reservation since review R68.
        *((True, c) for c in [*sorted(STREAMED), "huge"] if c not in AFTER_OUTPUT),
    ],
)
def test_a_gated_call_answered_with_garbage_charges_nothing(
    tmp_path: Path, garbage: Garbage, stream: bool, case: str
) -> None:
    """Review R61: through ``Gate.run`` of ``Gate.dispatch`` (or of ``Gate.dispatch_stream``,
    read to its end), a garbage answer is a ``BackendFailed`` and the call's reservation is
    released: nothing is charged, and never more than was reserved (2**70 reported tokens are
    not a bill)."""
    if case in ("held", "huge"):
        garbage.mode = case
    else:
        garbage.reply = (STREAMED if stream else WHOLE)[case]
    gated_call_charges_nothing(tmp_path, garbage, stream)


def gated_call_charges_nothing(tmp_path: Path, garbage: Garbage, stream: bool = False) -> None:
    """Through ``Gate.run`` of ``Gate.dispatch`` (or of ``Gate.dispatch_stream``, read to its
    end) with ``garbage`` as the only backend, the call is a ``BackendFailed`` naming it and its
    reservation is released: nothing charged."""
    setup = Setup(tmp_path)
    try:
        inventory = inventory_from_mapping(
            {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
        )
        setup.gate.attach_dispatcher(
            Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS, max_attempts=1)
        )
        gate = setup.gate
        before = setup.spent()
        auth = gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        with pytest.raises(BackendFailed, match=NAME):
            if stream:
                gate.run(auth, lambda: list(gate.dispatch_stream({**PAYLOAD, "stream": True})))
            else:
                gate.run(auth, lambda: gate.dispatch(PAYLOAD))
        gate.flush()  # the settlement is written behind the call
        assert setup.spent() == before
        settled = [gate.ledger.reservation(r) for r, _, _ in auth.reservations]
        assert [(r.state, r.actual) for r in settled] == [("released", 0)] * len(settled)
    finally:
        setup.gate.close()
