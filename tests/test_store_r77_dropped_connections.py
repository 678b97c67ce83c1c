"""Review R77 (the suite on Python 3.13): a store, grant repository or Gate dropped without
``close()`` lets go of its SQLite connections by design, and collecting them closed them silently
until Python 3.13, which warns ``ResourceWarning: unclosed database`` for each one collected open:
a program could not silence what agentgate's objects left. agentgate's connections now close
themselves when collected."""

from __future__ import annotations

import gc
import sqlite3
import sys
import warnings
from pathlib import Path

import pytest

from agentgate.authority import GrantRepository
from agentgate.store import SQLiteStore


def test_a_connection_of_the_store_closes_itself_when_collected(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db")
    conn = store.connect()
    conn.__del__()  # what collecting it runs
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")
    store.close()


@pytest.mark.skipif(
    sys.version_info < (3, 13),
    reason="before 3.13 sqlite3 warns nothing for a connection collected open, so this could not "
    "fail; the finalizer itself is tested above on every version",
)
def test_dropping_a_store_and_its_repository_unclosed_warns_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db")
    repo = GrantRepository(store)
    holder: list[object] = [store, repo]
    holder.append(holder)  # a cycle: only the collector frees them
    del store, repo, holder
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []
