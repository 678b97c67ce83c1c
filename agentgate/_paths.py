"""Paths agentgate makes directories for: where ``mkdir -p`` of a path would make a directory
only for the path to step out of it again (``..``), and the making of the missing ones, each
private (0700) whatever the umask.

Below ``keys`` and ``store``, which both make the directory a path names (a key pair's ``DIR``,
a SQLite store's), so that neither imports the other for it. Errors are the operating system's
here; each caller says them as its own typed error."""

from __future__ import annotations

import contextlib
import os
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


def make_private_directories(directory: Path) -> list[Path]:
    """Make ``directory`` and each missing directory above it, as ``mkdir -p`` does, one at a
    time, each with mode 0700 whatever the umask (``chmod`` after ``mkdir``, whose mode the umask
    only narrows: none is ever open to others), and return those made, outermost first; a
    directory there already (or a symbolic link to one) is left as it is. Until review R89
    ``mkdir -p`` gave the parents the umask's mode (0777 under umask 000): ``keys new --dir``
    then refused the pair because of the very directories it had made, and a SQLite store three
    levels below a missing directory sat in directories anyone could rename it out of.

    Raises the ``OSError`` of the directory that cannot be made (``FileExistsError`` where
    something that is no directory is there), or ``ValueError`` for a path no file name can hold
    (a NUL byte, a lone surrogate), having removed those it made."""
    made: list[Path] = []
    try:
        _make_missing(directory, made)
    except BaseException:
        remove_made(made)
        raise
    return made


def _make_missing(directory: Path, made: list[Path]) -> None:
    """``mkdir -p directory`` with mode 0700 for each directory made, appended to ``made``; one
    level at a time, in a loop (a path thousands of levels deep is no recursion)."""
    missing: list[Path] = []  # the directories below ``current`` still to make, innermost first
    current = directory
    while True:
        try:
            os.mkdir(current, 0o700)  # as ssh-keygen makes ~/.ssh
        except FileNotFoundError:
            if current.parent == current:
                raise
            missing.append(current)
            current = current.parent
            continue
        except OSError:
            if not current.is_dir():  # as mkdir -p: a directory there (or a link to one) is taken
                raise
        else:
            made.append(current)
            os.chmod(current, 0o700)  # the umask may have taken the owner's bits too
        if not missing:
            return
        current = missing.pop()


def remove_made(made: list[Path]) -> None:
    """Remove the directories ``made`` (outermost first, as ``make_private_directories`` returns
    them) again, innermost first; one that is not empty (another process wrote in it since) is
    left."""
    for made_directory in reversed(made):
        with contextlib.suppress(OSError):
            made_directory.rmdir()
