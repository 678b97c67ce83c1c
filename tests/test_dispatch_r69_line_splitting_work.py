"""Splitting a streamed piece into lines copies each byte a bounded number of times
(agentgate/dispatch/_sse.py, ``split_lines``).

Review R69: the test of this (tests/test_gateway_hostile_backends.py) compared two CPU timings
(eight times the lines within 24 times the seconds, least of three), an assertion about the
machine, not the code. These tests measure the work instead: the bytes allocated between one line
and the next, read from ``tracemalloc``, which are the same on any machine. Cutting the rest of
the buffer off after every line (the defect fixed in review R16) allocates a copy of what is left
of the piece per line: quadratic bytes."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import pytest

from agentgate.dispatch.backends import split_lines

Splitter = Callable[[AsyncGenerator[bytes, None], int], AsyncIterator[str]]


def _bytes_allocated_per_line(split: Splitter, lines: int) -> float:
    """The most memory ``split`` allocated (above what it held) between receiving one line and
    the next, summed over one piece of ``lines`` empty lines, per line."""

    async def one_piece() -> AsyncGenerator[bytes, None]:
        yield b"\n" * lines

    async def run() -> float:
        allocated = received = 0
        tracemalloc.start()
        try:
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            async for line in split(one_piece(), 1 << 20):
                assert line == ""
                received += 1
                allocated += tracemalloc.get_traced_memory()[1] - held
                held = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
        finally:
            tracemalloc.stop()
        assert received == lines
        return allocated / lines

    return asyncio.run(run())


async def _cutting_the_rest_off(pieces: AsyncGenerator[bytes, None], limit: int) -> AsyncIterator[str]:
    """Review R16's defect, as it was: the rest of the buffer copied after every line."""
    buffer = b""
    async for piece in pieces:
        buffer += piece
        while (end := buffer.find(b"\n")) >= 0:
            line, buffer = buffer[:end], buffer[end + 1 :]
            yield line.decode("utf-8", "replace").rstrip("\r")


@pytest.mark.parametrize("lines", [4 * 1024, 64 * 1024])
def test_splitting_a_streamed_piece_into_lines_is_linear_in_its_size(lines: int) -> None:
    """Review R69 (for review R16's finding): each line cut the rest of the buffer off, a copy of
    the piece per line: a backend sending a piece of 256 Ki short lines held the gateway's event
    loop, every caller's, for seconds. The piece is now searched once and each line copied once:
    what is allocated per line (about 70 bytes: the line's own objects) does not grow with the
    piece. R16's test showed this by CPU time; this one counts bytes."""
    per_line = _bytes_allocated_per_line(split_lines, lines)
    assert per_line <= 256, per_line


def test_the_count_sees_a_copy_per_line() -> None:
    """Review R69: the measure does see R16's defect (about 2,000 bytes per line for 4 Ki lines,
    half the piece), so the bound above is not met by measuring nothing."""
    assert _bytes_allocated_per_line(_cutting_the_rest_off, 4 * 1024) >= 1024
