"""Persistence: SQLite (embedded default) and PostgreSQL (shared, multi-process).

``open_store()`` reads ``AGENTGATE_STORE``: a ``postgresql://`` URL, or a path (or ``sqlite:///path``)
for SQLite; default ``.agentgate/agentgate.db`` under the current directory.
"""

from __future__ import annotations

import os
import re

from agentgate.errors import InputError, StoreError
from agentgate.store._base import Dialect, Row, Store, Transaction
from agentgate.store._file_name import sqlite_file_name
from agentgate.store._sqlite import SQLiteStore

DEFAULT_PATH = ".agentgate/agentgate.db"


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_HALF_URL = re.compile(
    r"(postgres(?:ql)?|sqlite|file)(?:\+[A-Za-z0-9]+)?"
    r"(?::(?!//)|[^A-Za-z0-9:/]?//|[^A-Za-z0-9]{1,4}[^/@]*:[^/]*@)",
    re.IGNORECASE,
)
"""A store scheme not followed by ``://``: its ``//`` missing (``postgresql:/db``, ``sqlite:file.db``),
or its ``:`` missing or mistyped (``postgresql//u:PW@h/db``, ``postgres;//...``), or signs other
than ``://`` before a user name and password (``postgresql/u:PW@h/db``, ``postgresql ://...``):
a mistyped URL, never a path (taken as one, a password in it was printed whole in "no store at
...")."""
_KEYWORD = re.compile(r"\s*([A-Za-z_]+)\s*=")
_UNEXPANDED = re.compile(r"^~|(?:^|/)\$\{?[A-Za-z_]")
"""A path that a shell would have expanded, left as written (``~/ag.db``, ``$HOME/ag.db``,
``${STATE_DIRECTORY}/ag.db``): a systemd unit, a Docker env file or a dotenv file expands neither."""


def is_conninfo(value: str) -> bool:
    """Whether ``value`` starts like a libpq key=value connection string (``host=...``,
    ``dbname=...``: a keyword libpq knows, then ``=``)."""
    found = _KEYWORD.match(value)
    if found is None:
        return False
    from psycopg import pq

    return found.group(1).encode() in {option.keyword for option in pq.Conninfo.get_defaults()}


def store_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store ``url`` names, else ``AGENTGATE_STORE``, else ``DEFAULT_PATH``.

    An empty ``url`` or ``AGENTGATE_STORE`` (``AGENTGATE_STORE=$UNSET`` in an env file) raises
    ``StoreError``: read as unset, a revocation would go to a new default store in the working
    directory, not to the store meant.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if url is not None and not isinstance(url, str):
        raise StoreError(
            f"a store is a URL or a path, given as text or a path object, got {type(url).__name__}"
        )
    if url is None:
        url = os.environ.get("AGENTGATE_STORE")
        if url == "":
            raise StoreError("AGENTGATE_STORE is set but empty: name the store, or unset it for the default")
        return DEFAULT_PATH if url is None else url
    if not url:
        raise StoreError("the store URL or path is empty: name the store, or pass None for AGENTGATE_STORE")
    return url


def open_store(
    url: str | os.PathLike[str] | None = None, *, create: bool = True, read_only: bool = False
) -> Store:
    """Open the store named by ``url``, else by ``AGENTGATE_STORE``, else the default SQLite file.

    ``create``: whether a store that does not exist is created (its file, directory and
    tables, on first use). A service that decides against a store in use opens it with
    ``create=False``: then a missing or empty SQLite file, another application's SQLite
    database and a PostgreSQL database holding none of agentgate's tables raise ``NoStore`` (a
    ``StoreError``, naming the store without its password and saying how to set one up:
    ``agentgate store init --store ...``), and nothing is created. A mistyped path would
    otherwise be a new, empty store, whose empty revocation list lets a revoked chain through
    and whose budgets start at nothing spent.

    ``postgresql://`` or ``postgres://`` (any case) is PostgreSQL; ``sqlite:///PATH`` or a plain
    path is SQLite. Any other ``scheme://`` raises ``StoreError``: taken as a path, a mistyped URL
    (``postgresql+psycopg://``, ``mysql://``) would quietly become a new local file, and whatever
    was written there (a revocation, say) would never reach the store the operator named. So does
    a libpq key=value connection string (``host=db dbname=agentgate``), for the same reason, and a
    store scheme without its ``//`` (``postgresql:/db``, ``sqlite:file.db``, ``file:x``) or its
    ``:`` (``postgresql//u:PW@h/db``, ``postgres;//...``), its password never shown. A NUL
    character is refused too (``StoreError``): libpq would read a database name only up to it, and
    so is a URL or path with white space or a line break at an end (a CRLF env file), and a
    ``sqlite:///`` URL with a query or fragment (``sqlite:///x.db?mode=ro``), whose file would
    otherwise be named ``x.db?mode=ro``, and a SQLite path starting with ``~`` or holding a
    ``$VARIABLE`` (``_literal_path``), and, as ``SQLiteStore`` refuses them, a SQLite path that
    names a directory and one that names where SQLite keeps another database's write-ahead log,
    shared-memory index or journal (``sqlite_file_name``).

    ``read_only`` (with ``create=False``; ``InputError`` with ``create=True``): the store is
    opened to read and never written, for a command that only reads (an auditor's ``audit
    verify`` of an evidence copy, a file or mount it may only read). A SQLite file is opened
    through a ``file://...?mode=ro`` URI (``_sqlite.read_only_uri``: ``immutable=1`` where neither
    a ``-wal`` nor a ``-journal`` is beside it), its journal mode left as it is and nothing
    checkpointed; a PostgreSQL session is read only (``default_transaction_read_only``). No
    part's tables are created (a part whose tables are missing is ``StoreError``), and a
    statement that would write raises ``StoreError``.
    """
    for flag, value in (("create", create), ("read_only", read_only)):
        if not isinstance(value, bool):
            raise InputError(f"{flag} must be True or False, got {type(value).__name__}")
    if read_only and create:
        raise InputError(
            "a store opened to read only is never created: pass create=False with read_only=True"
        )
    url = store_url(url)
    if "\x00" in url:  # sqlite3 raised ValueError for it; libpq reads a name only up to it
        raise StoreError("a store path or URL cannot hold a NUL character")
    scheme = _SCHEME.match(url)
    if scheme is None and is_conninfo(url):
        raise StoreError(
            "the store is a PostgreSQL key=value connection string, which agentgate does not read "
            "(nor take as a SQLite file name): write it as postgresql://USER:PASSWORD@HOST:PORT/DBNAME"
        )
    if url != url.strip():
        # `` postgresql://...`` (a stray space from a shell or a secrets file) would be a SQLite
        # file of that name, and ``/var/lib/agentgate.db\r`` (an env file saved with CRLF endings)
        # a new, empty store beside the real one: a revocation written there would reach nothing.
        # Refused, and not quoted (a URL may hold a password).
        raise StoreError("the store URL or path begins or ends with white space or a line break: remove it")
    if scheme is None:
        return SQLiteStore(_written_path(url, from_url=False), create=create, read_only=read_only)
    name = scheme.group(1).lower()
    if name in ("postgresql", "postgres"):
        from agentgate.store._postgres import PostgresStore

        return PostgresStore(name + url[len(name) :], create=create, read_only=read_only)
    if name == "sqlite" and url[scheme.end() :].startswith("/"):
        # sqlite:///rel.db, sqlite:////abs.db
        return SQLiteStore(
            _written_path(url[scheme.end() + 1 :], from_url=True), create=create, read_only=read_only
        )
    raise StoreError(
        f"unsupported store URL {url.split('://')[0]}://...: use a path, sqlite:///PATH or postgresql://..."
    )


def checked_sqlite_path(path: str, *, from_url: bool) -> str:
    """``path``, a SQLite store's file as a plain path or as what follows ``sqlite://``
    (``from_url``), as ``open_store`` takes it, else ``StoreError``: a query or fragment in a URL,
    an unexpanded ``~`` or ``$VARIABLE`` (``_literal_path``). A command that refuses a missing
    store checks this first, so that it names the mistake, not a file that does not exist. A
    plain path that starts with a store scheme not followed by ``://`` (``postgresql//u:PW@h/db``,
    ``sqlite:file.db``) is a mistyped URL: ``StoreError``, naming its scheme only. So is a path
    whose last part is empty or ``.`` (``state/``, ``state/.``): it names a directory; and one
    that is another database's ``-wal``, ``-shm`` or ``-journal`` (``sqlite_file_name``, which
    ``SQLiteStore`` runs as well)."""
    return sqlite_file_name(_written_path(path, from_url=from_url))


def _written_path(path: str, *, from_url: bool) -> str:
    """``path`` as ``checked_sqlite_path`` takes it, only its text checked: what is on disk there
    is ``sqlite_file_name``'s to look at, which ``SQLiteStore`` does as it opens (``open_store``
    leaves it to that, so it is looked at once)."""
    if not from_url and (half := _HALF_URL.match(path)) is not None:
        raise StoreError(
            f"the store URL {half.group(1)}... lacks the :// after its scheme: write "
            "postgresql://USER@HOST/DBNAME, sqlite:///PATH, or a plain path"
        )
    if from_url and ("?" in path or "#" in path):
        # ``sqlite:///agentgate.db?mode=ro`` (SQLAlchemy's form, or SQLite's URI parameters)
        # would be a new, empty store named ``agentgate.db?mode=ro`` beside the one meant.
        raise StoreError(
            "a sqlite:/// store URL takes no query or fragment (?... or #...): agentgate would "
            "take it for a part of the file name, a new store beside the one meant; write "
            "sqlite:///PATH alone"
        )
    if from_url and not path:  # ``sqlite:///``: ``Path("")`` is the working directory
        raise StoreError("the sqlite:/// store URL names no file: write sqlite:///PATH")
    return _literal_path(path)


def _literal_path(path: str) -> str:
    """``path``, read as written, unless it starts with ``~`` or holds a ``$NAME`` or ``${NAME}``
    at the start of a part (``StoreError``): agentgate expands neither, so ``~/ag.db`` from a systemd unit or an
    env file would be a new store under a directory named ``~`` in the working directory, and a
    revocation written there would reach nothing. ``./~/ag.db`` names such a directory."""
    if _UNEXPANDED.search(path):
        raise StoreError(
            "the SQLite store path starts with ~ or holds a $VARIABLE, which agentgate does not "
            "expand (a systemd unit or an env file left it as written): write the path itself"
        )
    return path


__all__ = [
    "DEFAULT_PATH",
    "Dialect",
    "Row",
    "SQLiteStore",
    "Store",
    "Transaction",
    "checked_sqlite_path",
    "is_conninfo",
    "open_store",
    "store_url",
]
