"""The agent names granted before schema version 3 are known after the upgrade (review R70).

Schema version 3 (review R69) added ``agentgate_agent_names``, the free agent names granted on a
store by how they read; a store of version 2 holds names granted already, recorded in its audit
log (each grant's ``allow`` entry on ``agent:NAME``), and until review R70 the table was made empty
on the upgrade: ``heIper`` was granted after an upgrade on a store whose ``helper`` was granted
before it. A store of version 2 is made here as version 2 left it (its layout checked against
``tests/schema/v2.DIALECT.txt``), on a real SQLite file and the session's real PostgreSQL server,
then upgraded by ``agentgate store init`` or by a Gate's first grant.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from test_gate_r69_store_names import _delegate, _gate
from test_langgraph import NAMES
from test_store_r68_schema_fingerprint import _postgresql_schema, _sqlite_schema

from agentgate.cli.main import main
from agentgate.errors import Denied
from agentgate.keys import SigningKey
from agentgate.store import open_store

SCHEMAS = Path(__file__).parent / "schema"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in NAMES}


def _init(url: str) -> None:
    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", url]) == 0


def _layout(url: str) -> str:
    return _postgresql_schema(url) if url.startswith("postgresql") else _sqlite_schema(url)


def _version_2_store(url: str, keys: dict[str, SigningKey], *names: str) -> None:
    """A store as schema version 2 left it, whose grants named ``names``: every part's tables
    but ``agentgate_agent_names`` (and the index ``approval_grants_grant`` of version 4), the
    schema row at version 2, and the grants in its log."""
    _init(url)
    gate = _gate(url, keys)
    try:
        for name in names:
            _delegate(gate, keys, name)
    finally:
        gate.close()
    store = open_store(url)
    try:
        with store.transaction() as tx:
            tx.execute("DROP TABLE agentgate_agent_names")
            tx.execute("DROP INDEX approval_grants_grant")  # schema version 4's (review R95)
            tx.execute("UPDATE agentgate_schema SET version = 1, newest = 2")
    finally:
        store.close()
    dialect = "postgresql" if url.startswith("postgresql") else "sqlite"
    assert _layout(url) == (SCHEMAS / f"v2.{dialect}.txt").read_text()


def _held(url: str) -> set[tuple[str, str]]:
    store = open_store(url)
    try:
        return {(str(r), str(n)) for r, n in store.query("SELECT reading, name FROM agentgate_agent_names")}
    finally:
        store.close()


def test_store_init_fills_in_the_names_granted_before_the_upgrade(
    url: str, keys: dict[str, SigningKey]
) -> None:
    """Review R70: ``helper`` was granted on a store of version 2; once ``store init`` upgraded
    it, a Gate granted ``heIper``: the table was made empty."""
    _version_2_store(url, keys, "helper")
    _init(url)
    assert ("helper", "helper") in _held(url)
    gate = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
            _delegate(gate, keys, "heIper")
        assert _delegate(gate, keys, "helper").name == "helper"
    finally:
        gate.close()


def test_a_gates_first_grant_fills_them_in_too(url: str, keys: dict[str, SigningKey]) -> None:
    """Review R70: without ``store init``, the table is made by a Gate's first grant of a new
    name, which is then compared with the names granted before (``pIanner`` after ``planner``)."""
    _version_2_store(url, keys, "planner", "helper")
    gate = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="'pIanner' reads as 'planner'"):
            _delegate(gate, keys, "pIanner")
        with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
            _delegate(gate, keys, "heIper")
    finally:
        gate.close()


def test_a_dead_name_and_an_entry_that_is_no_grant_are_left_out(
    url: str, keys: dict[str, SigningKey]
) -> None:
    """The fill-in reads grants only: a grant under a name no Gate grants today (``rеsearcher-bot``
    with a Cyrillic ``е``, as a version before review R67 granted it, which no decision takes)
    would keep the plain ``researcher-bot`` out, and a refusal or an allowed call whose
    argument holds ``"resource":"agent:`` is no grant."""
    dead = "r\u0435searcher-bot"
    _version_2_store(url, keys)
    gate = _gate(url, keys)
    try:
        gate.audit.append(
            {
                "kind": "allow",
                "principal": keys["supervisor"].did,
                "resource": f"agent:{dead}",
                "reasons": [f"delegated grant g1 to {dead} (did:key:z6Mk): tool:search; 60s"],
            }
        )
        gate.audit.append(
            {
                "kind": "deny",
                "principal": keys["supervisor"].did,
                "resource": "agent:wrIter",
                "reasons": ["no"],
            }
        )
        gate.audit.append(
            {
                "kind": "allow",
                "principal": keys["supervisor"].did,
                "resource": "tool:search",
                "args": {"query": '"resource":"agent:p1anner"'},
                "reasons": ["issued grant x"],
            }
        )
    finally:
        gate.close()
    _init(url)
    assert _held(url) == set()
    gate = _gate(url, keys)
    try:
        for name in ("researcher-bot", "writer", "planner"):
            assert _delegate(gate, keys, name).name == name
    finally:
        gate.close()
