"""Review R48, eighth second look: commit f7b9924 (``_grouped_key``, ``_key_like``'s ``0x`` prefix
and absolute-CamelCase-path exemption; ``_start_tail_clock`` returns early while the next
pipelined answer runs).

Found, and fixed by the lead in the same session (each was a strict xfail: grouped hex is judged
with separators, quotes, labels, ``0x`` and ``\\x`` taken out; the tail clock is stopped when
the next answer begins writing, not when its request starts, so a caller that stopped reading is
cut while a pipelined app has nothing to write yet):
- agentgate/keys.py: a seed in groups is recognised only when the whole value is groups: a label
  or assignment before it (``seed: c8c9cacb ...``, ``KEY=c8:c9:...``), quotes around it, ``0x``
  on each group, groups of 16 hex digits, a C array (``0xc8, 0xc9, ...``) or Python's bytes repr
  (``b'\\xc8\\xc9...'``) are quoted whole in ``load_signing_key``'s error.
- agentgate/dispatch/gateway/_http.py: an answer whose tail waits in the transport, followed by a
  pipelined request whose app writes nothing yet (a backend that takes long), gets no stall
  clock: a caller that stopped reading holds the connection for as long as that app runs.

Holds (passing): a UUID, a date-time, a path with dated directories that names no file and a
did:key are shown; a pipelined answer that ends while the previous tail waits starts the clock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from test_gateway_stall import STALL_S
from test_gateway_stall_paused import HIGH_WATER, _EndsPaused, connected

from agentgate.errors import KeyFileError
from agentgate.keys import load_signing_key

_SEED = bytes(range(200, 232))
_HEX = _SEED.hex()


def _quoted(value: str, secret: str) -> bool:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(value)
    shown = str(raised.value).replace(" ", "").replace(":", "").replace("-", "").replace("0x", "")
    shown = shown.replace(",", "").replace("\\x", "").lower()
    return secret[8:40] in shown


@pytest.mark.parametrize(
    "value",
    [
        "seed: " + " ".join(_HEX[i : i + 8] for i in range(0, 64, 8)),
        "KEY=" + ":".join(_HEX[i : i + 2] for i in range(0, 64, 2)),
        '"' + " ".join(_HEX[i : i + 8] for i in range(0, 64, 8)) + '"',
        " ".join("0x" + _HEX[i : i + 8] for i in range(0, 64, 8)),
        " ".join(_HEX[i : i + 16] for i in range(0, 64, 16)),
        ", ".join("0x" + _HEX[i : i + 2] for i in range(0, 64, 2)),
        repr(_SEED),
    ],
    ids=["labelled", "assigned", "quoted", "0x-each", "groups-of-16", "c-array", "bytes-repr"],
)
def test_a_grouped_seed_with_a_label_quotes_or_prefixes_is_not_quoted(value: str) -> None:
    assert not _quoted(value, _HEX)


@pytest.mark.parametrize(
    "value",
    [
        "123e4567-e89b-12d3-a456-426614174000",
        "2026-12-02T10:00:00Z",
        "/srv/keys/2026-12-02/agent",
        "/srv/keys/2026-12-02/2026-12-03/agent-key-v1/a",
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
    ],
)
def test_a_uuid_a_date_time_a_dated_path_and_a_did_are_shown(value: str) -> None:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(value)
    assert value in str(raised.value) or repr(value) in str(raised.value)


TAIL = 56 << 10
"""A first answer that stays, most of it, in the transport's buffer (below the high-water mark)."""


class _TailThenNext(_EndsPaused):
    """``/tail`` writes ``TAIL`` bytes at once; ``/wait`` writes nothing until ``go`` is set, then
    a short answer; ``/quick`` answers at once."""

    go = threading.Event()

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/tail":
            headers = [(b"content-length", str(TAIL).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"t" * TAIL})
            return
        if scope["path"] == "/wait":
            while not self.go.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def _tail_then(path: str) -> bool | None:
    """The caller sends ``/tail`` and ``path`` pipelined and never reads. None when the scene was
    not set up (the kernel took the whole tail); else whether the connection was cut."""
    _TailThenNext.go = threading.Event()
    with _TailThenNext() as served, connected(served) as (sock, protocol, transport):
        server = served.server
        try:
            sock.sendall(
                b"GET /tail HTTP/1.1\r\nHost: x\r\n\r\nGET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            deadline = time.monotonic() + 2
            while protocol.pipeline or protocol.cycle is None or protocol.cycle.scope["path"] != path:
                assert time.monotonic() < deadline, "the second request never started"
                time.sleep(0.002)
            if transport.get_write_buffer_size() == 0:
                return None
            assert transport.get_write_buffer_size() < HIGH_WATER
            deadline = time.monotonic() + 6 * STALL_S
            while server.server_state.connections and time.monotonic() < deadline:
                time.sleep(0.05)
            return not server.server_state.connections
        finally:
            _TailThenNext.go.set()  # the waiting app ends (and the server with it)


def _scene(path: str) -> bool:
    for _ in range(3):
        cut = _tail_then(path)
        if cut is not None:
            return cut
    pytest.fail("the scene was never set up")


def test_a_tail_followed_by_a_slow_pipelined_app_is_cut_when_its_caller_stops_reading() -> None:
    assert _scene("/wait")


def test_a_pipelined_answer_that_ends_while_the_tail_waits_starts_the_clock() -> None:
    assert _scene("/quick")
