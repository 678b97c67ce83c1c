"""Persistence: SQLite (embedded default) and PostgreSQL (shared, multi-process).

``open_store()`` reads ``AGENTGATE_STORE``: a ``postgresql://`` URL, or a path (or ``sqlite:///path``)
for SQLite; default ``.agentgate/agentgate.db`` under the current directory.
"""

from __future__ import annotations

import os

from agentgate.store._base import Dialect, Row, Store, Transaction
from agentgate.store._sqlite import SQLiteStore

DEFAULT_PATH = ".agentgate/agentgate.db"


def open_store(url: str | None = None) -> Store:
    """Open the store named by ``url``, else by ``AGENTGATE_STORE``, else the default SQLite file."""
    url = url or os.environ.get("AGENTGATE_STORE") or DEFAULT_PATH
    if url.startswith(("postgresql://", "postgres://")):
        from agentgate.store._postgres import PostgresStore

        return PostgresStore(url)
    if url.startswith("sqlite:///"):
        url = url[len("sqlite:///") :]
    return SQLiteStore(url)


__all__ = ["DEFAULT_PATH", "Dialect", "Row", "SQLiteStore", "Store", "Transaction", "open_store"]
