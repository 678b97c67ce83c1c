"""A tie within a second, between agent names granted before, broken in code point order on
every store (review R91, fourth reading).

``bobI`` reads as ``bobi`` and as ``Bobl`` (its ``I`` taken for ``l``, case folded). Granted in
the same second, the first of the two in code point order (``Bobl``: ``B`` comes before ``b``)
is the one a refusal of ``bobI`` names. ``AgentNames.claim`` ordered the names holding a reading
with ``ORDER BY first_at, name``, which orders text by the database's collation: on a PostgreSQL
database of ICU ``en-US`` (as clusters made under ``en_US.UTF-8`` order text) another Gate on
the store, or the granting one after a restart, named ``bobi``, while the granting Gate, and any
Gate on SQLite, named ``Bobl``. The names are now sorted in Python, in code point order, on both
stores: a real SQLite file and a database of ICU ``en-US`` on the session's real PostgreSQL
server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from test_policy_r91c_first_granted_named import POLICY, ROOT, WORKER

from agentgate import _confusables
from agentgate.errors import Denied
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store._pgserver import PostgresServer
from agentgate.store.agent_names import AgentNames


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a fresh PostgreSQL database whose text is ordered by ICU ``en-US``
    (``bobi`` before ``Bobl``), dropped after the test as ``postgres_url``'s are."""
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"
        )
    server.made.append(name)
    return server.url(name)


@pytest.fixture
def same_second(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Hold the wall clock at one instant: every grant after this in the same second."""

    def hold() -> None:
        fixed = float(int(time.time())) + 0.1
        monkeypatch.setattr(time, "time", lambda: fixed)

    return hold


def test_the_database_orders_text_apart_from_code_points(url: str) -> None:
    """The PostgreSQL case's database orders ``bobi`` before ``Bobl`` (what made the tie its
    own there); SQLite's, by code point, ``Bobl`` first."""
    store = open_store(url)
    try:
        with store.transaction(immediate=False) as tx:
            rows = tx.execute("SELECT ? AS n UNION ALL SELECT ? ORDER BY n", ("bobi", "Bobl"))
        expected = "bobi" if url.startswith("postgresql") else "Bobl"
        assert str(rows[0][0]) == expected
    finally:
        store.close()


def test_claim_names_the_first_in_code_point_order_of_a_tie(url: str) -> None:
    """bobi and Bobl claimed in the same second: a claim of bobI, which reads as both, is told
    Bobl, whatever order the database gives text."""
    store = open_store(url)
    try:
        names = AgentNames(store)
        for name in ("bobi", "Bobl"):
            with store.transaction() as tx:
                assert names.claim(tx, name, _confusables.readings(name), 100).earlier is None
        with store.transaction() as tx:
            assert names.claim(tx, "bobI", _confusables.readings("bobI"), 100).earlier == "Bobl"
    finally:
        store.close()


def _named(gate: Gate) -> str:
    """The agent granted before that the refusal of ``bobI`` names."""
    with pytest.raises(Denied) as refused:
        gate.issue(ROOT, name="bobI", key=WORKER, role="r")
    assert refused.value.finding is not None
    assert refused.value.finding.code == "name_reads_alike"
    return str(refused.value).partition("reads as ")[2].partition(",")[0].strip("'")


def test_every_gate_on_the_store_names_the_same_of_a_tie(url: str, same_second: Callable[[], None]) -> None:
    """bobi, then Bobl, granted in one second: the Gate that granted both, another Gate on the
    store and the first after a restart all name Bobl."""
    policy = parse_policy(POLICY, source="p.yaml")
    same_second()
    granting = Gate(policy, open_store(url))
    granting.issue(ROOT, name="bobi", key=WORKER, role="r")
    granting.issue(ROOT, name="Bobl", key=WORKER, role="r")
    other = Gate(policy, open_store(url))
    try:
        assert _named(granting) == "Bobl"
        assert _named(other) == "Bobl"
    finally:
        granting.close()
        other.close()
    restarted = Gate(policy, open_store(url))
    try:
        assert _named(restarted) == "Bobl"
    finally:
        restarted.close()
