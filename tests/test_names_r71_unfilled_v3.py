"""A store of schema version 3 whose ``agentgate_agent_names`` was made empty (review R71).

Review R69's code made the table empty on the upgrade; review R70 fills it, but only in the
transaction that makes it (``Store.ensure_schema``'s ``made``), so a store already upgraded by
R69's code (0.1.0 is unreleased: development stores only) keeps it empty. Left so, by choice:
filling it whenever it is found empty would read the whole audit log at every opening of every
store that never granted a name. docs/operations.md (Upgrading) gives the repair, which this
file runs on a real SQLite file and the session's real PostgreSQL server: drop the table as the
owner, and the next ``store init`` makes it again and fills it.
"""

from __future__ import annotations

import pytest
from test_gate_r69_store_names import _delegate, _gate
from test_names_r70_backfill import _held, _init, keys, url

from agentgate.errors import Denied
from agentgate.keys import SigningKey
from agentgate.store import open_store

__all__ = ["keys", "url"]  # the fixtures, imported for their use here


def test_the_documented_repair_fills_a_names_table_made_empty(url: str, keys: dict[str, SigningKey]) -> None:
    """Review R71: a version 3 store whose names table R69's code made empty granted ``heIper``
    after ``helper``; the repair docs/operations.md gives (``DROP TABLE agentgate_agent_names``,
    then ``store init``) fills it with the names the audit log records, and ``heIper`` is refused."""
    _init(url)
    gate = _gate(url, keys)
    try:
        _delegate(gate, keys, "helper")
    finally:
        gate.close()
    store = open_store(url)
    try:
        with store.transaction() as tx:
            tx.execute("DELETE FROM agentgate_agent_names")  # as R69's upgrade left it
    finally:
        store.close()
    assert _held(url) == set()

    store = open_store(url)
    try:
        with store.transaction() as tx:
            tx.execute("DROP TABLE agentgate_agent_names")
    finally:
        store.close()
    _init(url)

    assert ("helper", "helper") in _held(url)
    gate = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
            _delegate(gate, keys, "heIper")
    finally:
        gate.close()
