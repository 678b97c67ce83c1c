"""The raw test backends' shutdown (review R72): stop 54's CI run failed in a teardown, not a test."""

from __future__ import annotations

import asyncio
import socket

from test_gateway_hostile_backends import Hostile


class _Big(Hostile):
    """Answers any chat call with 32 MiB, then ends the connection (``writer.close()`` with most of
    it still buffered)."""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 33554432\r\n\r\n" + b"x" * (32 << 20))
        return False


def test_a_backend_stops_after_a_connection_its_buffer_drained_after_close_ended() -> None:
    """Pins (review R72): a connection closed with bytes buffered, whose caller then read them all,
    ends without asyncio counting it lost; ``Hostile.close`` aborted it again, and ``abort()``
    raised AttributeError on the loop the transport had let go of (stop 54's CI: an ERROR in
    test_gateway_r57_charges.py's teardown). It stops cleanly now."""
    backend = _Big()
    try:
        port = int(backend.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            body = b'{"stream": false}'
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            received = 0
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        assert received > 32 << 20
        assert backend.open == 0
    finally:
        backend.close()
    assert backend.loop.is_closed()
