"""The raw test backends' shutdown leaves no connection to the garbage collector (review R72): a
clean-clone CI run failed two shutdown-grace tests of test_gateway_app.py on three ResourceWarnings
(``StreamWriter.__del__`` "loop is closed", an unclosed transport, an unclosed server socket) from
connections another test's backend had left open when its loop closed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from _raw_server import RawServer
from test_gateway_hostile_backends import Hostile


@contextlib.contextmanager
def _left_to_the_collector() -> Iterator[list[str]]:
    """What the garbage collector finds unclosed on the way out (each as the hook saw it)."""
    found: list[str] = []

    def hook(unraisable: Any) -> None:
        found.append(f"{unraisable.object!r}: {unraisable.exc_value!r}")

    kept = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            yield found
            gc.collect()
    finally:
        sys.unraisablehook = kept


class _Untracked(Hostile):
    """Like test_gateway_app.py's ``_Recording``: its own ``_serve``, which neither records its
    writer nor closes it when cancelled."""

    def __init__(self) -> None:
        self.started = 0
        super().__init__()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.started += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
        writer.close()


def test_a_backend_stopped_with_a_connection_open_in_its_own_handler_leaves_nothing_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review R72: ``Hostile.close`` aborted only the writers its own ``_serve`` recorded; a
    subclass's ``_serve`` (``_Recording``) recorded none, its handler was cancelled while it waited
    on a connection still open (a gateway's idle pool, or one whose end it had not read yet), and
    the writer was left open on the closed loop: three ResourceWarnings in whichever test next
    collected garbage. Every connection is now ended by the server, whatever its handler."""
    # asyncio logs a cancelled handler's CancelledError (CPython 3.11), and the record kept here
    # would hold the handler's frame, and so its writer, past this test's collection.
    caplog.set_level(logging.CRITICAL, logger="asyncio")
    with _left_to_the_collector() as found:
        backend = _Untracked()
        port = int(backend.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            deadline = time.monotonic() + 10
            while not backend.started:
                assert time.monotonic() < deadline, "the connection never reached its handler"
                time.sleep(0.01)
            backend.close()
    assert found == []


@pytest.mark.parametrize("turns", range(6))
def test_a_connection_arriving_as_the_server_stops_is_ended_at_any_stage(turns: int) -> None:
    """Review R72: a connection accepted just before the stop becomes a transport, then a writer
    and a handler, a loop turn apart; a stop that cancelled the tasks it saw missed a handler not
    yet started (its writer never closed) and an accept not yet run (its socket never wrapped).
    ``RawServer.stop`` ends it whichever of those ``turns`` has reached."""

    async def wait(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def scenario() -> None:
        raw = RawServer(wait)
        port = await raw.start()
        client = socket.socket()
        client.setblocking(False)
        try:
            client.connect_ex(("127.0.0.1", port))
            for _ in range(turns):
                await asyncio.sleep(0)
            await raw.stop()
        finally:
            client.close()

    with _left_to_the_collector() as found:
        asyncio.run(scenario())
    assert found == []
