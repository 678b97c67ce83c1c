"""A ``Content-Length`` written with thousands of leading zeros (review R88).

RFC 9110 (8.6) makes ``Content-Length`` ``1*DIGIT``, and the parser reads ``00...0084`` as 84.
The gateway's HTTP edge read it with ``int()``, which refuses a text of more than 4,300 digits:
a ``ValueError`` in the parser's callback, answered a bare 400 "Invalid HTTP request received."
and logged as a uvicorn warning, where 4,000 zeros were served. Now the zeros are dropped before
the value is read: the call is served, or its body refused for its size, as with a plain length.
The gateway's pool read a backend's answer's length the same way, and does so too.

Real loopback sockets against the gateway tests' ``env`` fixture and a hand-written backend."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_gateway import Env, _body
from test_gateway_server_settings import _HEAD, _answer, _served
from test_gateway_upstream import _Backend

from agentgate._http_limits import declared_length
from agentgate.dispatch.gateway import invocation_headers
from agentgate.dispatch.gateway._upstream import UpstreamPool

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

_ZEROS = b"0" * 5000
"""More digits than ``int()`` reads (4,300)."""


@pytest.mark.parametrize("zeros", [b"", _ZEROS])
def test_a_length_after_thousands_of_zeros_is_read_as_its_value(env: Env, zeros: bytes) -> None:
    body = _body()
    raw = json.dumps(body).encode()
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head
    request += b"Content-Length: %s%d\r\nConnection: close\r\n\r\n%s" % (zeros, len(raw), raw)
    answer = _answer(env.server.port, request)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]


@pytest.mark.parametrize("zeros", [b"", _ZEROS])
def test_a_declared_length_after_thousands_of_zeros_over_the_limit_is_refused_413(
    env: Env, zeros: bytes
) -> None:
    with _served(env, max_body_bytes=100) as server:
        declared = _answer(
            server.port, _HEAD + b"Content-Length: %s101\r\nExpect: 100-continue\r\n\r\n" % zeros
        )
    assert declared.startswith(b"HTTP/1.1 413 "), declared[:300]
    assert b"over 100 bytes (Content-Length: 101)" in declared, declared[:300]


def test_a_backends_length_after_thousands_of_zeros_is_read_as_its_value() -> None:
    """The gateway's pool read a backend's ``Content-Length`` the same way: its answer was
    ``not an HTTP answer`` (an ``UpstreamError``, the backend taken as failing)."""
    whole = b'{"id":"x","choices":[]}'

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %s%d\r\n\r\n%s" % (_ZEROS, len(whole), whole))
        await writer.drain()
        return True

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool()
            assert await pool.post(url, b"{}") == (200, whole, None)
            await pool.aclose()

    asyncio.run(scenario())


def test_declared_length_reads_digits_alone_whatever_their_zeros() -> None:
    assert declared_length(b" 0084 ") == 84
    assert declared_length("0" * 5000 + "84") == 84
    assert declared_length(b"0" * 5000) == 0
    assert declared_length("9" * 25) == 10**20
    for value in ("", "-1", "1.5", "\xb2", "٣", "1, 1", b"0x10"):
        assert declared_length(value) is None, value
