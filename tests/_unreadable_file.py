"""One file that cannot be opened, or read once opened, with a chosen error: ``os.open`` or
``os.read`` of that file alone fails, so that the error is certain whatever the machine and user
(reviews R91b and R91c of the file outputs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def fail_reading(monkeypatch: pytest.MonkeyPatch, path: Path, call: str, error: int) -> None:
    """Make ``os.open`` (``call`` ``"open"``) or ``os.read`` (``"read"``) of the file at ``path``
    raise ``OSError(error)``; every other file opens and reads as before, until
    ``monkeypatch.undo()``."""
    real_open, real_read = os.open, os.read
    opened: set[int] = set()

    def failing_open(opening: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(opening) == str(path) and call == "open":
            raise OSError(error, os.strerror(error), str(opening))
        fd = real_open(opening, *args, **kwargs)
        if os.fspath(opening) == str(path):
            opened.add(fd)
        return fd

    def failing_read(fd: int, size: int) -> bytes:
        if fd in opened:
            raise OSError(error, os.strerror(error))
        return real_read(fd, size)

    monkeypatch.setattr(os, "open", failing_open)
    monkeypatch.setattr(os, "read", failing_read)
