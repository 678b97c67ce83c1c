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
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from aiohttp.client_reqrep import ConnectionKey
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace


class _CheckedConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that closes, instead of reusing, a pooled connection on which the
    backend sent anything since its last answer ended (or that failed meanwhile)."""

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        while (connection := await super()._get(key, traces)) is not None:
            protocol = connection.protocol
            if protocol is not None and not protocol.should_close and not _unread(protocol.transport):
                return connection
            connection.close()  # bytes arrived unasked: not the next call's to read
        return None


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
        # could close one under a request.
        connector=_CheckedConnector(limit=1000, limit_per_host=0, keepalive_timeout=4.0),
        skip_auto_headers=("User-Agent",),
        read_bufsize=1 << 20,  # the longest stream event line it reads
    )
