"""The file a SQLite store's path names, looked at before the store opens it: not a directory
(``_file_named``), not another database's write-ahead log, shared-memory index or journal
(``_not_a_sidecar``). ``SQLiteStore`` runs these itself (``sqlite_file_name``), so that a store
made in code is held to them as one named by ``open_store`` or ``--store`` is: until a regression
review of R89 only ``open_store`` did, and ``SQLiteStore("st/a.db-wal")`` (as the examples build
a ``Gate``) made a store that SQLite deleted at the next write of ``st/a.db``."""

from __future__ import annotations

import os
import stat

from agentgate.errors import StoreError
from agentgate.store._existing import resolved, shown


def sqlite_file_name(path: str) -> str:
    """``path``, a SQLite store's file as given, unless it names a directory (``_file_named``)
    or where SQLite keeps another database's ``-wal``, ``-shm`` or ``-journal``
    (``_not_a_sidecar``): ``StoreError``, naming it. Nothing is created or opened."""
    return _not_a_sidecar(_file_named(path))


_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


def _file_named(path: str) -> str:
    """``path``, unless its last part is empty or ``.`` (``state/``, ``state/.``, ``.``):
    ``StoreError``, naming it. Such a path names a directory, as the shell and ``open`` read it,
    but ``Path`` drops a trailing separator and ``/.``: until review R89 ``store init --store
    state/`` created a SQLite file named ``state``, a store beside the one meant, and the
    ``state/agentgate.db`` meant next was refused (``state`` a file). A last part ``..`` is kept
    by ``Path``: it is refused as a directory as the store opens."""
    last = path
    for sep in _SEPARATORS:
        last = last.rpartition(sep)[2]
    if last == ".":
        why = "has '.' as its last part"
    elif not last and path:
        why = f"ends in {path[-1]!r}"
    else:
        return path
    raise StoreError(
        f"the SQLite store path {shown(path)} {why}: that names a directory; name the database "
        "file in it (--store or AGENTGATE_STORE)"
    )


_SIDECARS = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}
"""The files SQLite keeps beside a database ``NAME``: ``NAME-wal`` and so on, and what each holds."""


def _not_a_sidecar(path: str) -> str:
    """``path``, unless the file it names (``resolved``, as SQLite finds it) is where SQLite keeps
    the ``-wal``, ``-shm`` or ``-journal`` of a database beside it (``_database_at``):
    ``StoreError``, naming both. Until review R89 ``store init --store st/a.db-wal`` (tab
    completion's slip for ``st/a.db``) made a store there, and ``grant revoke --store
    st/a.db-wal`` said ``revoked``, exit 0; the next command that wrote ``st/a.db`` had SQLite
    take that file for its write-ahead log, find its header invalid and delete it, the revocation
    with it. A path that cannot be resolved is left to opening the store to refuse. (A file that
    holds a write-ahead log or a journal, whatever its name, SQLite refuses as "not a database",
    changing nothing; it is not read here: closing a descriptor of a store this process has open
    would drop every POSIX lock its connections hold on it, ``_sqlite._create``.)"""
    try:
        file = resolved(path)
    except (OSError, ValueError):  # no working directory, a NUL: the store's opening says why
        return path
    for end, what in _SIDECARS.items():
        if file.endswith(end) and _database_at(file[: -len(end)]):
            database = path[: -len(end)] if path.endswith(end) else file[: -len(end)]
            raise StoreError(
                f"the SQLite store path {shown(path)} is where SQLite keeps the {what} of the "
                f"database {shown(database)}, which SQLite deletes or overwrites when that database "
                "is opened: name the store's own file (--store or AGENTGATE_STORE)"
            )
    return path


def _database_at(path: str) -> bool:
    """Whether ``path`` is a regular file that may be a SQLite database: empty (not written yet),
    or of a whole number of 512-byte units (a database is a whole number of pages, each a power
    of two from 512 bytes). Looked at, never opened (``_not_a_sidecar``). A symbolic link is
    not one: SQLite keeps a link's files beside its target."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and status.st_size % 512 == 0
