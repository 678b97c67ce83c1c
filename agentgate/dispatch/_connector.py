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
form since aiohttp 3.11, the least version this package takes); nothing here is public.
"""

from __future__ import annotations

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
            if protocol is not None and not protocol.should_close:
                return connection
            connection.close()  # bytes arrived unasked: not the next call's to read
        return None


def chat_session() -> aiohttp.ClientSession:
    """The session the dispatcher's chat calls go over (``BackendClient``'s ``session``)."""
    return aiohttp.ClientSession(
        # Idle connections are dropped before a backend's own keep-alive timeout (uvicorn's: 5 s)
        # could close one under a request.
        connector=_CheckedConnector(limit=1000, limit_per_host=0, keepalive_timeout=4.0),
        skip_auto_headers=("User-Agent",),
        read_bufsize=1 << 20,  # the longest stream event line it reads
    )
