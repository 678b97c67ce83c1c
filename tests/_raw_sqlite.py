"""An SQLite file a test opens beside agentgate, as another program would: ``opened(path)`` is
``sqlite3.connect(path)`` in a ``with`` block that commits (or rolls back) and then closes.
sqlite3's own ``with`` block only commits, and the connection it leaves open is closed when
collected, which Python 3.13 reports (``ResourceWarning: unclosed database``, an error in this
suite) in whatever test is running then (review R77)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def opened(path: Any, **kwargs: Any) -> Iterator[sqlite3.Connection]:
    """``sqlite3.connect(path, **kwargs)``, committed when the block ends, rolled back when it
    raises, closed either way."""
    with contextlib.closing(sqlite3.connect(path, **kwargs)) as db, db:
        yield db


def query(path: Any, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """The rows ``sql`` reads from the SQLite file at ``path``, its connection closed."""
    with opened(path) as db:
        return db.execute(sql, params).fetchall()
