"""``Gate.delegations`` reads revocation from the store (review R62).

Until R62 the list dropped a delegation only when its grant was revoked through the same Gate
(``_forget_revoked``) or expired and a later delegation purged it: a revocation written by another
process (another Gate on the same store, ``agentgate grant revoke``) left the sub-agent listed as
live until its grant expired, and so did the delegation tree examples/research_team.py prints.
Reading the list now asks the store which of its grants are revoked, in one statement for all of
them, and leaves out the expired ones.

Real components: two Gates over one SQLite file (test_langgraph's team) or one PostgreSQL
database, the CLI in-process."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import NAMES, Team, _make_team, _policy_text

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import AgentIdentity, Gate, _delegation
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, open_store

pytest_plugins = ("test_gate_r60_delegations_kept",)  # its ``team`` fixture (a Team in tmp_path)

CAPS = ["tool:search"]


@pytest.fixture
def other(team: Team) -> Iterator[Gate]:
    """A second Gate on the same store file, as another process would open it."""
    gate = Gate(team.gate.policy, SQLiteStore(team.path / "agentgate.db"))
    yield gate
    gate.close()


def _delegate(team: Team, name: str, seconds: int = 300) -> AgentIdentity:
    return team.gate.delegate(
        team.supervisor,
        name=name,
        key=SigningKey.generate(),
        capabilities=CAPS,
        ttl=timedelta(seconds=seconds),
    )


def _names(gate: Gate) -> list[str]:
    return [child.name for _, child in gate.delegations]


def test_a_revocation_by_another_gate_on_the_same_store_leaves_the_list_at_once(
    team: Team, other: Gate
) -> None:
    """Review R62: a grant revoked by another Gate on the same store stayed listed as live."""
    doomed = _delegate(team, "doomed")
    _delegate(team, "spared")
    other.revoke(doomed.grant_id, by="other process", reason="done")
    assert _names(team.gate) == ["spared"]


def test_an_ancestor_revoked_by_another_gate_takes_every_descendant_off_the_list(
    team: Team, other: Gate
) -> None:
    """Review R62: revoking the supervisor's grant elsewhere left its sub-agents listed as live."""
    _delegate(team, "one")
    _delegate(team, "two")
    other.revoke(team.supervisor.grant_id, by="other process", reason="stop")
    assert team.gate.delegations == []


def test_a_revocation_by_the_cli_leaves_the_list(
    team: Team, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R62: ``agentgate grant revoke`` on the store left the sub-agent listed as live."""
    doomed = _delegate(team, "doomed")
    _delegate(team, "spared")
    monkeypatch.chdir(team.path)
    store = str(team.path / "agentgate.db")
    assert main(["grant", "revoke", doomed.grant_id, "--store", store, "--reason", "cli"]) == 0
    capsys.readouterr()
    assert _names(team.gate) == ["spared"]


def test_an_expired_delegation_is_not_listed_before_the_next_delegation(team: Team) -> None:
    """Review R62: an expired sub-agent stayed listed until a later delegation purged the list."""
    _delegate(team, "brief", seconds=1)
    _delegate(team, "lasting")
    time.sleep(1.1)  # "brief"'s grant has expired; no delegation since
    assert _names(team.gate) == ["lasting"]


def test_reading_the_list_asks_the_store_once_for_all_its_grants(
    team: Team, other: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R62: one revocation read for the whole list, never one per delegation."""
    made = [_delegate(team, f"sub{i}") for i in range(5)]
    other.revoke(made[2].grant_id, reason="one of them")
    asked: list[Sequence[str]] = []
    real = team.gate.grants.revoked

    def counted(grant_ids: Sequence[str]) -> set[str]:
        asked.append(grant_ids)
        return real(grant_ids)

    monkeypatch.setattr(team.gate.grants, "revoked", counted)
    assert _names(team.gate) == ["sub0", "sub1", "sub3", "sub4"]
    assert len(asked) == 1
    assert set(asked[0]) == {team.supervisor.grant_id, *(m.grant_id for m in made)}


def test_a_list_longer_than_one_statement_takes_is_read_in_parts_and_stays_right(
    team: Team, other: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R62: past ``REVOKED_READ_AT_ONCE`` grant ids the list is read in parts; a revoked
    grant in any part leaves the list."""
    monkeypatch.setattr(_delegation, "REVOKED_READ_AT_ONCE", 2)
    made = [_delegate(team, f"sub{i}") for i in range(5)]
    other.revoke(made[4].grant_id, reason="the last part")
    other.revoke(made[0].grant_id, reason="the first part")
    assert _names(team.gate) == ["sub1", "sub2", "sub3"]


def test_a_closed_gate_cannot_tell_which_delegations_are_live(tmp_path: Path) -> None:
    """Review R62: with the store closed, revocation cannot be read: a typed ``StoreError``,
    never the list shown as live."""
    team = _make_team(tmp_path)
    _delegate(team, "left")
    team.gate.close()
    with pytest.raises(StoreError, match="closed"):
        _names(team.gate)


@pytest.mark.postgres
def test_on_postgresql_a_revocation_by_another_gate_leaves_a_long_list(postgres_url: str) -> None:
    """Review R62: on a shared PostgreSQL store, a list of more than 64 grants (the revocation
    read's ``IN`` form) drops the one another Gate revoked."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(
        _policy_text({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros"), source="t.yaml"
    )
    with Gate(policy, open_store(postgres_url)) as gate, Gate(policy, open_store(postgres_url)) as elsewhere:
        supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        made = [
            gate.delegate(
                supervisor,
                name=f"sub{i}",
                key=SigningKey.generate(),
                capabilities=CAPS,
                ttl=timedelta(minutes=5),
            )
            for i in range(64)  # with the supervisor's grant, 65 ids: past the 64 of the seek form
        ]
        elsewhere.revoke(made[33].grant_id, reason="one of many")
        assert [c.grant_id for _, c in gate.delegations] == [m.grant_id for m in made if m is not made[33]]
