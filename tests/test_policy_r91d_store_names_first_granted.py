"""A running Gate that refuses a free name from its own memory names the agent the store names
(review R91, fourth reading).

``bobI`` reads as ``bobi`` and as ``bobl``. A Gate refuses it from its memory of the names it
granted (``_read_alike``), and until now named the first of those: with ``bobl`` granted by
another Gate on the store and ``bobi`` five seconds later by this one, this Gate's refusal, its
audit reason and its hint ("issue under 'bobi' itself") named ``bobi``, while a Gate opened on
the store, and this one after a restart, named ``bobl``, the first granted
(``AgentNames.claim``). The refusal now asks the store which: a real SQLite file and the
session's real PostgreSQL server, two Gates on one store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from test_policy_r91c_first_granted_named import POLICY, ROOT, WORKER, _named
from test_policy_r91c_first_granted_named import clock as clock  # the fixture

from agentgate.errors import Denied
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import open_store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


def _gate(url: str) -> Gate:
    return Gate(parse_policy(POLICY, source="p.yaml"), open_store(url))


def test_the_first_granted_by_another_gate_is_named(url: str, clock: Callable[[float], None]) -> None:
    """bobl granted by another Gate, bobi five seconds later by this one: this Gate names bobl,
    for issue and for delegate, as a Gate opened now and this one after a restart do."""
    other, this = _gate(url), _gate(url)
    try:
        clock(0)
        other.issue(ROOT, name="bobl", key=WORKER, role="r")
        clock(5)
        parent = this.issue(ROOT, name="bobi", key=WORKER, role="r")
        assert _named(this) == "bobl"
        with pytest.raises(Denied, match="a sub-agent named 'bobI' reads as 'bobl'"):
            this.delegate(
                parent, name="bobI", key=WORKER, capabilities=["tool:t.x"], ttl=timedelta(minutes=1)
            )
    finally:
        other.close()
        this.close()
    restarted = _gate(url)
    try:
        assert _named(restarted) == "bobl"
    finally:
        restarted.close()


def test_a_store_that_cannot_tell_leaves_the_gates_own_name(
    tmp_path: Path, clock: Callable[[float], None]
) -> None:
    """The store's record of the names gone from under a running Gate: its refusal still stands,
    a Denied naming the name it granted, not a StoreError."""
    url = str(tmp_path / "agentgate.db")
    gate = _gate(url)
    try:
        clock(0)
        gate.issue(ROOT, name="bobi", key=WORKER, role="r")
        with sqlite3.connect(url) as conn:
            conn.execute("DROP TABLE agentgate_agent_names")
        assert _named(gate) == "bobi"
    finally:
        gate.close()
