"""A raw asyncio test server (``asyncio.start_server`` on 127.0.0.1) whose stop ends every
connection it accepted before its loop goes (review R72).

A connection left open when a test's loop closes is finalized later, by the garbage collector, in
whatever test then runs: its ``StreamWriter`` ("loop is closed"), transport and socket each warn,
and pytest fails that test (CI: two shutdown-grace tests of test_gateway_app.py, for connections a
backend of another test had kept). Three ways leaked one: a handler cancelled while it waited (a
connection the gateway kept idle) that never closed its writer; a connection accepted just before
the stop, whose handler had not started when the tasks were cancelled; a writer closed with bytes
still buffered, whose socket closes only once they drain."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """Serves each connection with ``handler`` (its writer closed when the handler ends, however);
    ``stop`` (in the server's loop) closes the listener, cancels the handlers, aborts what is still
    open and returns once the server counts no connection, each socket closed."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.writers: set[asyncio.StreamWriter] = set()
        self.handlers: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listens on 127.0.0.1; the port."""
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.add(writer)
        try:
            await self.handler(reader, writer)
        except asyncio.CancelledError:
            # Ended by ``stop``: the task ends as returned, since CPython 3.11's callback on a
            # handler's task asks a cancelled one for its exception and logs the CancelledError.
            pass
        finally:
            writer.close()
            self.handlers.discard(task)

    async def stop(self) -> None:
        assert self.server is not None
        server = self.server
        # No connection is accepted from here; one accepted already gets its transport a loop turn
        # later, and the server counts it from then (``_connections``) until its socket is
        # closed. close() first would refuse that transport (an AssertionError in Server._attach)
        # and leave its socket to the collector.
        loop = asyncio.get_running_loop()
        for sock in server.sockets:
            loop.remove_reader(sock.fileno())
        await asyncio.sleep(0)
        server.close()
        async with asyncio.timeout(10):
            while _connections(server):
                # Handlers are cancelled once started (one cancelled before it starts never closes
                # its writer); a new connection's handler starts a turn or two after it is accepted.
                for task in self.handlers:
                    if not task.cancelling():
                        task.cancel()
                for writer in self.writers:
                    # Only a socket still open: a transport closed with bytes buffered that then
                    # drained has let go of its loop, and its abort() raises AttributeError.
                    sock = writer.transport.get_extra_info("socket")
                    if sock is not None and sock.fileno() != -1:
                        writer.transport.abort()
                await asyncio.sleep(0)
        self.writers.clear()


def _connections(server: asyncio.Server) -> int:
    """How many connections ``server`` counts: CPython's ``Server._active_count`` until 3.12,
    the size of its ``_clients`` from 3.13 (review R77: the suite on 3.13)."""
    count = getattr(server, "_active_count", None)
    return len(server._clients) if count is None else int(count)  # type: ignore[attr-defined]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """Read one request off ``reader``: its head, up to the blank line (its request line too,
    unless the caller read that already), and its body, as long as its Content-Length says (none
    without one); the head and the body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)
