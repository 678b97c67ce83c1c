"""Review R91c of the bounded HTTP protocol's refusals (agentgate/_bounded_http.py): a request
pipelined behind one still being answered, and refused by the protocol (here a chunk size that is
not one: 400), has its refusal written once the answer before it ends.

The refusal was made (``refusal_body``) when the request was refused, and the gateway counts each
refusal made in ``agentgate_gateway_errors_total``: a caller that left before the answer ahead of
it ended never got the 400, yet it was counted. docs/gateway.md says only the answers sent are
counted; a refusal is now made as it is written, and only then.

uvicorn with the bounded protocol, whose ``refusal_body`` records each refusal it makes (as the
gateway's counts them), and an app that holds ``/held`` until released or its caller is gone."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from test_gateway_r87b_pipeline_held import HELD, _until
from test_gateway_r87b_pipeline_held import _Served as _HeldServed

from agentgate._bounded_http import ON_LOST, BoundedHttpToolsProtocol
from agentgate._http_limits import HttpLimits

MALFORMED = b"POST /next HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"


class _Counting(BoundedHttpToolsProtocol):
    """The bounded protocol, each refusal it makes recorded by status in ``made``."""

    made: list[int]

    def refusal_body(self, status: int, text: str) -> tuple[str, bytes]:
        self.made.append(status)
        return super().refusal_body(status, text)


class _Served(_HeldServed):
    """uvicorn serving ``_Counting``; ``/held`` is answered once ``released`` is set, or not at all
    once its caller is gone (``lost``)."""

    def __init__(self) -> None:
        self.made: list[int] = []
        super().__init__(
            loop="auto",  # uvicorn's default, as before the class was shared
            protocol=type("_Counting", (_Counting.with_limits(HttpLimits()),), {"made": self.made}),
        )

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        scope[ON_LOST] = self.lost.set
        await receive()
        while not (self.released.is_set() or self.lost.is_set()):
            await asyncio.sleep(0.005)
        if self.lost.is_set():
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def served() -> Iterator[_Served]:
    with _Served() as serving:
        yield serving


@contextlib.contextmanager
def _refused_behind_held(served: _Served) -> Iterator[socket.socket]:
    """A connection whose ``/held`` call runs, with the malformed request refused behind it."""
    with socket.create_connection(served.listener.getsockname(), timeout=10) as sock:
        sock.sendall(HELD + MALFORMED)
        _until(lambda: bool(served.server.server_state.connections))
        (protocol,) = served.server.server_state.connections
        _until(lambda: getattr(protocol, "_refusal", None) is not None)  # both requests parsed
        yield sock


def test_a_queued_refusal_the_caller_left_before_is_not_made(served: _Served) -> None:
    with _refused_behind_held(served):
        pass  # the caller leaves while /held is still being answered
    _until(served.lost.is_set)
    _until(lambda: not served.server.server_state.connections)
    assert served.made == []


def test_a_queued_refusal_written_after_the_answer_is_made_once(served: _Served) -> None:
    with _refused_behind_held(served) as sock:
        served.released.set()
        received = b""
        while piece := sock.recv(65536):
            received += piece
    assert received.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 400 " in received, received
    assert served.made == [400]
