"""Paths agentgate makes directories for: where ``mkdir -p`` of a path would make a directory
only for the path to step out of it again (``..``).

Below ``keys`` and ``store``, which both make the directory a path names (a key pair's ``DIR``,
a SQLite store's), so that neither imports the other for it."""

from __future__ import annotations

from pathlib import Path


def unmade_above(path: Path) -> Path | None:
    """The part of ``path`` up to and including its last ``..`` when that names no directory,
    else ``None`` (no ``..``, or the directory is there). The kernel reads a ``..`` after what
    comes before it, so ``new/..`` names nothing until ``new`` is made: making ``new`` for it
    leaves a directory nobody asked for (until review R88 ``open_store("x/new/../s.db")`` made
    ``x/new``, and ``open_store("x/new/..")`` and ``save_key(key, "x/new/..", name)`` still did).
    Whatever comes after the last ``..`` may be made as any other missing directory is.

    Where the file system cannot tell whether that directory is there (a name too long, a
    directory that may not be searched: ``is_dir`` raises the ``OSError``), this returns ``None``
    and the caller's own making of the directory meets the same error on the same walk of the
    path and reports it as the caller's typed error; until review R88's third regression pass
    that ``OSError`` escaped ``save_key`` bare. Nothing is made either way: the making only
    goes on to a parent after ``ENOENT``."""
    parts = path.parts
    if ".." not in parts:
        return None
    above = Path(*parts[: len(parts) - parts[::-1].index("..")])
    try:
        there = above.is_dir()
    except OSError:  # cannot tell: the caller's mkdir fails the same way, inside its own try
        return None
    return None if there else above
