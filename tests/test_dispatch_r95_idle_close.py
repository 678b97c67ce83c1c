"""Review R95 of a backend closing an idle kept-alive connection as a call is sent on it.

A backend whose keep-alive is shorter than the pool's (gunicorn's 2 s against the pool's 4 s)
closes an idle connection; a call sent just before its close lands failed (``ServerDisconnectedError``
or ``ECONNRESET``), the backend marked down and the call failed over, or failed with one backend.
Such a call is now sent once more on a new connection, on the dispatcher's aiohttp pool
(``dispatch/_connector.py``) and on the gateway's lean pool (``gateway/_upstream.py``); never once
a byte of the answer has come, never on a new connection, and only once.

The race is made deterministic with a raw loopback backend that answers the first chat request of
each connection, kept alive, and ends the connection when the next one arrives on it, unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator

import _http
import pytest
from _raw_server import RawServer, read_request
from test_dispatch_r68_kept_alive import _answer

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch._connector import chat_session
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.dispatch.inventory import Inventory
from agentgate.errors import BackendFailed

PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
TIMEOUTS = Timeouts(connect_s=2, first_token_s=5, idle_s=5, answer_max_s=5, decode_tokens_per_s=1000)
CHAT_PATH = b"/v1/chat/completions"


class ClosesReused:
    """A backend that answers the first chat request of each connection (of the first
    ``answering`` connections: all, by default) and ends the connection on its next one, once it
    has arrived, without an answer: ``how`` is ``"eof"`` (the request read whole, then a FIN: the
    idle close), ``"reset"`` (its first line read, then an RST) or ``"head"`` (read whole, the
    start of a status line written, then a FIN: the backend had begun to answer). Other paths
    (health probes) are always answered. ``chats`` counts the chat requests that arrived,
    ``connections`` the connections that carried one."""

    def __init__(self, how: str, stream: bool, answering: int | None = None) -> None:
        self.how = how
        self.stream = stream
        self.answering = answering
        self.chats = 0
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        counted = False
        while True:
            line = await reader.readline()
            if not line:
                return
            chat = line.split(b" ")[1] == CHAT_PATH
            if chat:
                self.chats += 1
                if not counted:
                    counted = True
                    self.connections += 1
            if chat and (answered or (self.answering is not None and self.connections > self.answering)):
                await self._end(reader, writer)
                return
            await read_request(reader)
            if chat:
                answered = True
                writer.write(_answer("OK", self.stream))
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async def _end(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.how == "reset":
            sock = writer.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        await read_request(reader)  # read whole: the close is a FIN, not a reset
        if self.how == "head":
            writer.write(b"HTTP/1.1 200")
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def backend(server: ClosesReused) -> AsyncIterator[str]:
    raw = RawServer(server.serve)
    port = await raw.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await raw.stop()


def _inventory(url: str) -> Inventory:
    return inventory_from_mapping({"backends": [{"name": "b0", "url": url, "models": ["small"]}]})


@contextlib.asynccontextmanager
async def client_of(url: str, pool: str) -> AsyncIterator[BackendClient]:
    """A client of the backend at ``url`` over the dispatcher's aiohttp pool or the gateway's."""
    async with _http.AsyncClient() as http:
        if pool == "lean":
            client = BackendClient(_inventory(url).backends[0], http, TIMEOUTS)
            client.transport = upstream = UpstreamPool()
            try:
                yield client
            finally:
                await upstream.aclose()
            return
        async with chat_session() as session:
            yield BackendClient(_inventory(url).backends[0], http, TIMEOUTS, session=session)


async def _call(client: BackendClient, stream: bool) -> str:
    if stream:
        return "".join([chunk.content async for chunk in client.stream(PAYLOAD)])
    return (await client.chat(PAYLOAD)).content


POOLS = ["aiohttp", "lean"]


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_call_on_an_idle_connection_the_backend_closed_is_sent_again_on_a_new_one(
    pool: str, stream: bool, how: str
) -> None:
    server = ClosesReused(how, stream)
    async with backend(server) as url, client_of(url, pool) as client:
        assert await _call(client, stream) == "OK"
        assert await _call(client, stream) == "OK"  # its pooled connection closed under it
    assert (server.chats, server.connections) == (3, 2)


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_whose_answer_had_begun_is_not_sent_again(pool: str, stream: bool) -> None:
    server = ClosesReused("head", stream)
    async with backend(server) as url, client_of(url, pool) as client:
        assert await _call(client, stream) == "OK"
        with pytest.raises(BackendFailed):
            await _call(client, stream)
    assert (server.chats, server.connections) == (2, 1)


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_that_fails_on_a_new_connection_is_not_sent_again(pool: str, stream: bool) -> None:
    server = ClosesReused("eof", stream, answering=0)  # no chat request is answered
    async with backend(server) as url, client_of(url, pool) as client:
        with pytest.raises(BackendFailed):
            await _call(client, stream)
    assert (server.chats, server.connections) == (1, 1)


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_is_sent_again_once_only(pool: str, stream: bool) -> None:
    server = ClosesReused("eof", stream, answering=1)  # the new connection's request is dropped too
    async with backend(server) as url, client_of(url, pool) as client:
        assert await _call(client, stream) == "OK"
        with pytest.raises(BackendFailed):
            await _call(client, stream)
    assert (server.chats, server.connections) == (3, 2)


async def test_the_dispatcher_neither_fails_the_call_nor_marks_the_backend_down() -> None:
    server = ClosesReused("eof", stream=False)
    async with backend(server) as url:
        inventory = _inventory(url)
        dispatcher = Dispatcher(
            inventory, Router(inventory), timeouts=TIMEOUTS, max_attempts=1, recovery_wait_s=0
        )
        await dispatcher.start()
        try:
            for _ in range(3):
                assert (await dispatcher.chat(PAYLOAD)).content == "OK"
            assert not dispatcher.is_down("b0")
        finally:
            await dispatcher.aclose()
    assert server.chats == 5  # the second and third each found its connection closed
