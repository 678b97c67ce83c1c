"""Free agent names remembered by the store, not by one Gate object (review R69).

Earlier in review R69 a Gate refused a free agent name that reads as one it granted before
(``heIper`` after ``helper``), but only from its own memory: another process on the same store,
or the same Gate restarted, did not know the earlier names and granted ``heIper``. The readings
of every name granted are now kept in the store (``agentgate_agent_names``), claimed in the
grant's own transaction: a real SQLite file and the session's real PostgreSQL server, a second
process and a restarted Gate.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import NAMES, _entries, _policy_text

from agentgate import _confusables
from agentgate.cli.main import main
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.agent_names import AgentNames

_OTHER_PROCESS = """
import sys
from datetime import timedelta
sys.path.insert(0, {tests!r})
from test_langgraph import NAMES, _policy_text
from agentgate.gate import Gate
from agentgate.keys import SigningKey, load_signing_key
from agentgate.policy import parse_policy
from agentgate.store import open_store

keys = {{n: load_signing_key({keys!r} + "/" + n + ".key") for n in NAMES}}
policy = parse_policy(_policy_text({{n: k.did for n, k in keys.items()}}, 1_000_000, "usd_micros"), source="team.yaml")
gate = Gate(policy, open_store({url!r}))
supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
gate.delegate(supervisor, name={name!r}, key=SigningKey.generate(), capabilities=["tool:search"], ttl=timedelta(minutes=1))
gate.close()
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, SigningKey]:
    made = {name: SigningKey.generate() for name in NAMES}
    for name, key in made.items():
        save_key(key, tmp_path / "keys", name)
    return made


def _gate(url: str, keys: dict[str, SigningKey]) -> Gate:
    policy = parse_policy(
        _policy_text({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros"), source="team.yaml"
    )
    return Gate(policy, open_store(url))


def _delegate(gate: Gate, keys: dict[str, SigningKey], name: str) -> AgentIdentity:
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    return gate.delegate(
        supervisor,
        name=name,
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )


@pytest.fixture
def gate(url: str, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    made = _gate(url, keys)
    yield made
    made.close()


def test_a_name_another_process_granted_is_known(
    url: str, keys: dict[str, SigningKey], tmp_path: Path, gate: Gate
) -> None:
    """Review R69: a process granted ``helper``; a Gate of another process on the same store then
    granted ``heIper``, knowing nothing of it."""
    script = _OTHER_PROCESS.format(
        tests=str(Path(__file__).parent), keys=str(tmp_path / "keys"), url=url, name="helper"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with pytest.raises(Denied, match="'heIper' reads as 'helper'") as refused:
        _delegate(gate, keys, "heIper")
    assert refused.value.finding is not None
    assert refused.value.finding.code == "name_reads_alike"
    assert _delegate(gate, keys, "helper").name == "helper"


def test_a_restarted_gate_remembers(url: str, keys: dict[str, SigningKey]) -> None:
    """Review R69: a Gate restarted on the same store delegated to ``pIanner`` after ``planner``,
    and issued to ``wrIter`` after ``writer``; each refusal is audited."""
    first = _gate(url, keys)
    _delegate(first, keys, "planner")
    first.close()
    again = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="'pIanner' reads as 'planner'"):
            _delegate(again, keys, "pIanner")
        denied = _entries(again)[-1]
        assert (denied.kind, denied.resource) == ("deny", "agent:pIanner")
        again.issue(keys["root"], name="writer", key=keys["researcher"], role="researcher")
    finally:
        again.close()
    third = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="an agent named 'wrIter' reads as 'writer'"):
            third.issue(keys["root"], name="wrIter", key=keys["researcher"], role="researcher")
        denied = _entries(third)[-1]
        assert (denied.kind, denied.resource) == ("deny", "agent:wrIter")
    finally:
        third.close()


def test_a_refused_name_claims_nothing(gate: Gate, keys: dict[str, SigningKey], url: str) -> None:
    """Review R69: a refused grant leaves no reading of its name behind (the claim is in the
    grant's transaction, rolled back with it): ``heIper`` (readings ``heiper`` and ``helper``)
    refused after ``helper`` does not keep ``heiper``, so ``heiper`` itself is granted."""
    _delegate(gate, keys, "helper")
    with pytest.raises(Denied):
        _delegate(gate, keys, "heIper")
    store = open_store(url)
    try:
        held = {(str(r), str(n)) for r, n in store.query("SELECT reading, name FROM agentgate_agent_names")}
    finally:
        store.close()
    # The principal ``supervisor``, issued before the table was made, is filled in with it
    # (review R70: ``AgentNames._fill_in``).
    assert held == {("helper", "helper"), ("supervisor", "supervisor")}
    assert _delegate(gate, keys, "heiper").name == "heiper"


@pytest.mark.postgres
def test_two_claims_at_once_have_one_winner(postgres_url: str) -> None:
    """Review R69: two processes granting ``helper`` and ``heIper`` at once must not both win: the
    second claim waits for the first's transaction and then reads its name."""
    store = open_store(postgres_url)
    other = open_store(postgres_url)
    names, rival = AgentNames(store), AgentNames(other)
    answers: list[str | None] = []
    try:
        with store.transaction() as tx:
            assert names.claim(tx, "helper", _confusables.readings("helper"), 1).earlier is None

            def claim_too() -> None:
                with other.transaction() as theirs:
                    answers.append(rival.claim(theirs, "heIper", _confusables.readings("heIper"), 2).earlier)

            racing = threading.Thread(target=claim_too)
            racing.start()
        racing.join(timeout=60)
        assert answers == ["helper"]
    finally:
        store.close()
        other.close()


@pytest.mark.postgres
def test_a_least_privilege_role_on_a_store_without_the_table_is_refused_the_grant_clearly(
    postgres_url: str, keys: dict[str, SigningKey]
) -> None:
    """Review R69: the application role of docs/operations.md (no CREATE) on a store the owner
    set up before ``agentgate_agent_names`` existed: deciding goes on, a grant of a new name is
    refused with a ``StoreError`` naming the table and the owner's ``store init``, nothing
    written; once the owner ran it, the grant is made."""
    from test_cli_postgresql import documented_app_role, role_url

    from agentgate.errors import StoreError

    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", postgres_url]) == 0
    owner = open_store(postgres_url)
    try:
        owner.query("DROP TABLE agentgate_agent_names")  # as a store of schema version 2 holds
    finally:
        owner.close()
    documented_app_role(postgres_url, "ag_r69_names")
    app = _gate(role_url(postgres_url, "ag_r69_names"), keys)
    try:
        supervisor = app.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        before = len(_entries(app))
        with pytest.raises(StoreError, match=r"agentgate_agent_names \(agent_names\) is missing.*store init"):
            app.delegate(
                supervisor,
                name="helper",
                key=SigningKey.generate(),
                capabilities=["tool:search"],
                ttl=timedelta(minutes=1),
            )
        assert len(_entries(app)) == before
        with redirect_stdout(io.StringIO()):
            assert main(["store", "init", "--store", postgres_url]) == 0
        owner = open_store(postgres_url)
        try:  # the rights again, as docs/operations.md's Upgrading says
            owner.query("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ag_r69_names")
        finally:
            owner.close()
        assert _delegate(app, keys, "helper").name == "helper"
        with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
            _delegate(app, keys, "heIper")
    finally:
        app.close()
