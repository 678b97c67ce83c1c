"""Review R69: bytes a backend sent on a kept-alive connection that the event loop had not read yet
when the connection was taken from the dispatcher's aiohttp pool.

R68's ``_CheckedConnector`` closes a pooled connection on which aiohttp has already received
bytes nobody asked for. Bytes still in the kernel's socket buffer (sent while the loop was busy,
not yet read by it) were not seen: the connection was reused, and those bytes were read as the
next call's answer, whatever it asked. The connector now also peeks at the socket, without
reading from it, when it takes a connection from the pool. A backend on 127.0.0.1 served by a
thread of its own (the event loop is held busy while the bytes arrive).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import _http

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._connector import chat_session
from agentgate.dispatch.backends import BackendClient, Timeouts

PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}


def _answer(text: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    body = json.dumps({"id": "c", "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body.encode()


def _read_request(conn: socket.socket, buffer: bytearray) -> bool:
    """Read one request (head and ``Content-Length`` body) off ``conn``; False at its end."""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return False
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = next(
        (
            int(v)
            for n, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
            if n.strip().lower() == b"content-length"
        ),
        0,
    )
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return False
        rest += data
    buffer[:] = rest[length:]
    return True


class Leftover:
    """Answers the first request of all with ``FIRST`` and, 0.1 s later on the same connection,
    sends ``LEFTOVER`` unasked; every later request with ``FRESH``. ``connections`` counts them."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.requests = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                with self.lock:
                    self.connections += 1
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        with conn, contextlib.suppress(OSError):
            while _read_request(conn, buffer):
                with self.lock:
                    self.requests += 1
                    first = self.requests == 1
                if first:
                    conn.sendall(_answer("FIRST"))
                    time.sleep(0.1)
                    conn.sendall(_answer("LEFTOVER"))
                else:
                    conn.sendall(_answer("FRESH"))

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def _backend() -> Iterator[Leftover]:
    made = Leftover()
    try:
        yield made
    finally:
        made.close()


async def test_bytes_not_yet_read_off_a_pooled_connection_are_not_the_next_answer() -> None:
    """Review R69: the second call got ``LEFTOVER``, sent before it was; now ``FRESH``, over a
    connection of its own."""
    with _backend() as backend:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b", "url": backend.url, "engine": "vllm", "models": ["small"]}]}
        )
        async with _http.AsyncClient() as http, chat_session() as session:
            client = BackendClient(inventory.backends[0], http, Timeouts(), session=session)
            assert (await client.chat(PAYLOAD)).content == "FIRST"
            time.sleep(0.5)  # the loop held: LEFTOVER arrives in the socket's buffer, unread by it
            assert (await client.chat(PAYLOAD)).content == "FRESH"
            assert backend.connections == 2


async def test_a_quiet_pooled_connection_is_still_reused() -> None:
    """Review R69: the peek reads nothing off a connection with nothing waiting: it is reused."""
    with _backend() as backend:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b", "url": backend.url, "engine": "vllm", "models": ["small"]}]}
        )
        backend.requests = 1  # no LEFTOVER: every answer is FRESH
        async with _http.AsyncClient() as http, chat_session() as session:
            client = BackendClient(inventory.backends[0], http, Timeouts(), session=session)
            for _ in range(3):
                assert (await client.chat(PAYLOAD)).content == "FRESH"
            assert backend.connections == 1
