"""The scene of ``test_gateway_stall_paused`` (an answer that ended with writing paused, whose
caller stops reading with bytes left in the gateway's buffer below the low-water mark) is set up
however the gateway's event loop is scheduled while the caller reads."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_gateway_stall_paused as paused

STALLED_WHILE = (16 << 10, 26 << 10)
"""The gateway's buffer (bytes) at which its loop is stalled: above the low-water mark, below what
the kernel's buffers on the connection take at once (about 29 KiB here)."""


class _StallingCaller:
    """The caller's socket, whose first read with the gateway's buffer in ``STALLED_WHILE`` first
    stalls the gateway's event loop for 200 ms (a loaded machine's scheduling)."""

    def __init__(self, sock: socket.socket, protocol: Any) -> None:
        self.sock = sock
        self.protocol = protocol
        self.stalled = False

    def recv(self, size: int) -> bytes:
        low, high = STALLED_WHILE
        if not self.stalled and low < self.protocol.transport.get_write_buffer_size() <= high:
            self.stalled = True
            self.protocol.loop.call_soon_threadsafe(time.sleep, 0.2)
            time.sleep(0.01)  # the loop is in its stall before the caller reads on
        return self.sock.recv(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_the_paused_answer_scene_is_set_up_when_the_gateways_loop_stalls_while_its_caller_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R72: the caller read on while the gateway's loop waited for a CPU: it emptied the
    kernel's buffers, the loop's next write took the whole tail, and the window below the
    low-water mark was missed; eight scenes in a row missed it beside a CPU burner (the test
    failed "the scene was never set up"). The caller now lets the loop turn after each read."""
    connected = paused.connected

    @contextlib.contextmanager
    def stalling(served: paused._EndsPaused) -> Iterator[tuple[Any, Any, Any]]:
        with connected(served) as (sock, protocol, transport):
            yield _StallingCaller(sock, protocol), protocol, transport

    monkeypatch.setattr(paused, "connected", stalling)
    assert paused._ends_paused_then_stops_reading(), "the window below the low-water mark was missed"
