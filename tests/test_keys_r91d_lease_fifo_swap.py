"""Review R91d of the file outputs (agentgate/keys.py, ``replace_file``): before an output
replaces the regular file at its path, that file is opened without blocking to see what it holds.
A file another process holds a kernel lease on refuses that open (``EWOULDBLOCK``) while its
holder is told to let go, and since review R91c it is opened again, waiting for that. That second
open went by name after a look at the path: a FIFO renamed over the path between the look and the
open (the holder, told to let go at that very moment, knows when) was opened blocking, and the
command waited for a writer for good. The file the look found regular is now the one reopened.

The refused open and the swap are made certain here: the non-blocking open of the path raises
``BlockingIOError`` as a lease's break does, and a FIFO is renamed over the path right after the
next look at it by name returns."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from test_http_r91b_out_fifo_swapped_in import write_unless_blocked


@pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="kernel leases are Linux's")
def test_a_fifo_swapped_in_while_a_lease_breaks_is_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(b"{}\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    real_open, real_lstat = os.open, os.lstat
    refused: list[bool] = []

    def swap_once_looked_at(path: Any) -> None:
        if refused and fifo.exists() and os.fspath(path) == str(out):
            os.rename(fifo, out)

    def open_as_under_a_lease(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(out) and flags & os.O_NONBLOCK and not refused:
            refused.append(True)
            raise BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK), str(path))
        fd = real_open(path, flags, *args, **kwargs)
        swap_once_looked_at(path)
        return fd

    def lstat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        status = real_lstat(path, *args, **kwargs)
        swap_once_looked_at(path)
        return status

    monkeypatch.setattr(os, "open", open_as_under_a_lease)
    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    raised = write_unless_blocked(monkeypatch, out, b'{"written": true}\n', " as the lease broke")
    assert refused and not fifo.exists(), "the lease's refusal and the swap both happened"
    assert raised == []
    assert out.read_bytes() == b'{"written": true}\n'  # the file checked was the regular one
