"""The dispatcher's pool of kept-alive connections for chat calls: ``chat_session``, an
``aiohttp.ClientSession`` whose connector never reuses a connection that holds bytes nobody asked for.

aiohttp reuses a pooled connection as long as it is open: bytes a backend sent on it after a
whole answer (a forged or repeated answer, an unasked ``408`` before an idle close, garbage) were
parsed while it sat in the pool and read as the next call's answer, whatever that call had asked
(until review R68 a second call got the answer "LEFTOVER" the backend had sent before it was
sent). httpx's pool (probes, scrapes, chat calls without a session) already drops an idle
connection that has become readable. A connection that failed part-way through an answer is
never reused by either (its body not read to its end).

The check is made where aiohttp takes a connection from its pool (``TCPConnector._get``, its
form since aiohttp 3.11, the least version this package takes); nothing here is public. It
looks at what aiohttp has received (``should_close``) and, since review R69, at the socket
itself (``_unread``: a peek, nothing read off it): bytes that reached the kernel while the
event loop was busy, not yet handed to aiohttp, were read as the next call's answer before.
What it cannot see is a byte that arrives after the check, between taking the connection and
the request reaching the backend (a few microseconds of the loop's own work): sent then, unasked,
it is indistinguishable on the wire from an answer to that request.

Nor can any check see a backend's close of an idle connection that is still on its way: a
backend whose keep-alive is shorter than the pool's (``keepalive_timeout``, 4 s; gunicorn's is
2 s, a proxy's may be as short) closes it, and a call sent in the few hundred microseconds before
its FIN lands fails with ``ServerDisconnectedError`` or ``ECONNRESET``, the request never read.
aiohttp sends a request once more after that only for an idempotent method, never for a POST.
``posted`` does, once, on a new connection (review R95: until then the call failed, the backend
was marked down and the call failed over, or failed outright with one backend), and only where
the request may not have been read: the connection came from the pool, and not one byte of an
answer had arrived on it when it failed. A backend that closes an idle connection (the case
this is for) never read the request. One that read it and then closed or died without a byte
of answer may have begun running the call: sent again, it runs it once more. That is no worse
than what the dispatcher does with any call that fails before its output (it sends it to the
next backend); a chat call changes nothing but the backend's load, and nothing is charged for an
answer that never came. Once a byte of the answer has arrived, or on a new connection (where no
idle close can explain the failure), nothing is sent again here.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler

if TYPE_CHECKING:
    from aiohttp.client_reqrep import ConnectionKey
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace


class _Handler(ResponseHandler):
    """aiohttp's protocol of one connection, which also notes whether any byte has arrived on it
    since it was last taken from the pool (``heard``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.heard = False

    def data_received(self, data: bytes) -> None:
        if data:
            self.heard = True
        super().data_received(data)


class _Taking:
    """What the pool handed one request (``posted``): the pooled connection it took (``reused``;
    ``None``: a new one), and whether it must open a new one (``fresh``)."""

    __slots__ = ("fresh", "reused")

    def __init__(self) -> None:
        self.reused: _Handler | None = None
        self.fresh = False


_TAKING: ContextVar[_Taking | None] = ContextVar("agentgate_pool_taking", default=None)
"""Set by ``posted`` around its request: ``_CheckedConnector._get`` notes in it the pooled
connection it hands that request (aiohttp takes it in the caller's task)."""


class _CheckedConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that closes, instead of reusing, a pooled connection on which the
    backend sent anything since its last answer ended (or that failed meanwhile), and tells
    ``posted`` which pooled connection a request went over."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # aiohttp's own protocol, noting whether a byte arrived (``_Handler``), which ``posted`` asks.
        self._factory = cast(
            "functools.partial[ResponseHandler]", functools.partial(_Handler, loop=self._loop)
        )

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        taking = _TAKING.get()
        if taking is not None and taking.fresh:
            return None  # sent once more: on a new connection, the pooled ones left as they are
        while (connection := await super()._get(key, traces)) is not None:
            protocol = connection.protocol
            if protocol is not None and not protocol.should_close and not _unread(protocol.transport):
                if isinstance(protocol, _Handler):
                    protocol.heard = False
                    if taking is not None:
                        taking.reused = protocol
                return connection
            connection.close()  # bytes arrived unasked: not the next call's to read
        return None


async def posted(session: aiohttp.ClientSession, url: str, **kwargs: Any) -> aiohttp.ClientResponse:
    """``session.post(url, **kwargs)``'s answer, its head read (enter it, to release it).

    Sent once more, on a new connection, if it went over a connection taken from
    ``chat_session``'s pool that failed (``ServerDisconnectedError``, ``ClientOSError``) before
    any byte of an answer arrived: the backend closed it for being idle as the request was sent
    (see the module docstring for why a POST may be). Raises what ``session.post`` raises: the
    second try's failure, or the first's where it is not sent again.
    """
    taking = _Taking()
    token = _TAKING.set(taking)
    try:
        try:
            return await session.post(url, **kwargs)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if taking.reused is None or taking.reused.heard:
                raise
        taking.fresh = True
        return await session.post(url, **kwargs)
    finally:
        _TAKING.reset(token)


def _unread(transport: object) -> bool:
    """Whether the socket under ``transport`` holds bytes (or its peer's close) that the event loop
    has not read yet: a non-blocking peek on a duplicate of its descriptor, nothing consumed.
    False when there is no socket to look at (its absence is aiohttp's to find)."""
    if not isinstance(transport, asyncio.Transport):
        return False
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        # A duplicate: asyncio's ``TransportSocket`` offers no ``recv``, and the loop owns the original.
        # Non-blocking already (the flag is the loop's descriptor's, shared): set again, so that
        # the peek never waits whatever Python makes of the duplicate.
        with socket.socket(fileno=os.dup(sock.fileno())) as peek:
            peek.setblocking(False)
            peek.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return False  # nothing waiting: the connection is as the last answer left it
    except OSError:
        return True  # a reset or a closed descriptor: not one to send a call over
    return True  # a byte, or b"" (the peer closed it)


def chat_session() -> aiohttp.ClientSession:
    """The session the dispatcher's chat calls go over (``BackendClient``'s ``session``)."""
    return aiohttp.ClientSession(
        # Idle connections are dropped before a backend's own keep-alive timeout (uvicorn's: 5 s)
        # could close one under a request; a backend whose keep-alive is shorter may, and a call
        # it fails that way is sent once more (``posted``).
        connector=_CheckedConnector(limit=1000, limit_per_host=0, keepalive_timeout=4.0),
        skip_auto_headers=("User-Agent",),
        read_bufsize=1 << 20,  # the longest stream event line it reads
    )
