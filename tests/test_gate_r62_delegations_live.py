"""``Gate.delegations`` reads revocation from the store (review R62).

Until R62 the list dropped a delegation only when its grant was revoked through the same Gate
(``_forget_revoked``) or expired and a later delegation purged it: a revocation written by another
process (another Gate on the same store, ``agentgate grant revoke``) left the sub-agent listed as
live until its grant expired, and so did the delegation tree examples/research_team.py prints.
Reading the list now asks the store which of its grants are revoked, in one statement for all of
them, and leaves out the expired ones.

Real components: two Gates over one SQLite file (test_langgraph's team), the CLI in-process."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.cli.main import main
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

CAPS = ["tool:search"]


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


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
