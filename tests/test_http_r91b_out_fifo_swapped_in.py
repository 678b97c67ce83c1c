"""Review R91b of the file outputs (agentgate/keys.py, ``replace_file``): before an output
replaces the regular file at its path, that file is opened to see whether it holds what no output
may replace (``_irreplaceable``: a private key, a SQLite database). A FIFO put there between the
look at the path (a regular file then) and that open made the open wait for a writer: the command
hung for good. It is now opened without blocking and refused as not a regular file, nothing
written.

The swap is made certain here: ``os.lstat`` reports the regular file that was at the path before
the FIFO took its place."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agentgate.keys import replace_file

WAIT_S = 1.5  # far past what the refusal takes (milliseconds): only a blocked open reaches it


def write_unless_blocked(
    monkeypatch: pytest.MonkeyPatch, out: Path, data: bytes, when: str
) -> list[BaseException]:
    """``replace_file(out, data)`` in a thread; fail the test if it is still blocked (on a FIFO at
    ``out``) after WAIT_S, else return what it raised. ``monkeypatch`` is undone first. Used by
    tests/test_keys_r91d_lease_fifo_swap.py."""
    raised: list[BaseException] = []

    def write() -> None:
        try:
            replace_file(out, data, 0o644)
        except BaseException as exc:
            raised.append(exc)

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    writing.join(WAIT_S)
    monkeypatch.undo()
    if writing.is_alive():  # blocked opening the FIFO: a writer coming and going ends the wait
        os.close(os.open(out, os.O_WRONLY | os.O_NONBLOCK))
        writing.join(WAIT_S)
        pytest.fail(f"replace_file waited on the FIFO put at its path{when}")
    return raised


def test_a_fifo_swapped_in_after_the_look_is_refused_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(b"{}")
    looked_at = os.lstat(out)
    out.unlink()
    os.mkfifo(out)
    real_lstat = os.lstat

    def lstat_before_the_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == str(out):
            return looked_at
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat_before_the_swap)
    raised = write_unless_blocked(monkeypatch, out, b'{"written": true}', "")
    assert len(raised) == 1 and isinstance(raised[0], OSError), raised
    assert "not a regular file is there" in str(raised[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]  # the FIFO, nothing written
    assert not out.is_file()
