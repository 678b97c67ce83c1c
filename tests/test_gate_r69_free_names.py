"""Free agent names that read as one another (review R69).

Review R68 compared an agent's name with the principals' names by how it reads (Unicode TR39's
confusables). Free names, the ones no principal holds, were compared with nothing: a Gate
delegated to ``helper`` and then to ``heIper`` (a capital ``I``), two agents an approver and a
reader of the audit log take for one. The Gate now keeps how each name it granted reads (its
``_confusables.readings``, for the last ``AGENT_NAMES_KEPT`` names) and refuses a new name that
reads as one of them: ``Denied``, ``authority_chain_opacity``/``name_reads_alike``, naming both,
audited as any refused grant is. The store keeps them for every process on it
(tests/test_gate_r69_store_names.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_langgraph import Team, _entries
from test_langgraph import team as team  # the fixture

from agentgate import _confusables
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, _delegation
from agentgate.keys import SigningKey


def _delegate(team: Team, name: str, key: SigningKey | None = None) -> AgentIdentity:
    return team.gate.delegate(
        team.supervisor,
        name=name,
        key=key or SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )


@pytest.mark.parametrize(("first", "second"), [("helper", "heIper"), ("mallory-bot", "rnallory-bot")])
def test_a_sub_agent_name_reading_as_an_earlier_ones_is_refused(team: Team, first: str, second: str) -> None:
    """Review R69: ``Gate.delegate(name="heIper")`` after ``name="helper"`` was granted: two
    sub-agents recorded as ``agent:helper`` and ``agent:heIper``, which a reader takes for one."""
    _delegate(team, first)
    with pytest.raises(Denied) as refused:
        _delegate(team, second)
    error = refused.value
    assert error.finding is not None
    assert (error.finding.kind.value, error.finding.code) == ("authority_chain_opacity", "name_reads_alike")
    assert f"{second!r} reads as {first!r}" in str(error)
    denied = _entries(team.gate)[-1]
    assert (denied.kind, denied.resource) == ("deny", f"agent:{second}")
    assert "authority_chain_opacity:name_reads_alike" in denied.reasons


def test_an_agent_name_reading_as_an_earlier_ones_is_not_issued(team: Team) -> None:
    """Review R69: ``Gate.issue(name="pIanner")`` after ``name="planner"`` (a free name: no
    principal's) was issued."""
    team.gate.issue(team.keys["root"], name="planner", key=team.keys["supervisor"], role="supervisor")
    with pytest.raises(Denied, match="'pIanner' reads as 'planner'"):
        team.gate.issue(team.keys["root"], name="pIanner", key=team.keys["supervisor"], role="supervisor")


def test_the_same_name_again_and_names_that_read_apart_are_granted(team: Team) -> None:
    """One name delegated again (to a fresh key: the same sub-agent restarted) and names a
    reader tells apart are granted as before."""
    _delegate(team, "helper")
    assert _delegate(team, "helper").name == "helper"
    assert _delegate(team, "helper-2").name == "helper-2"


def test_a_principals_name_on_its_own_key_is_left_to_the_principal_rule(team: Team) -> None:
    """A name that reads as a principal's is the principal rule's (review R66: ``Researcher`` on
    the researcher's own key is the researcher), not refused as reading like an earlier grant."""
    researcher = team.keys["researcher"]
    team.gate.issue(team.keys["root"], name="researcher", key=researcher, role="researcher")
    own = team.gate.issue(team.keys["root"], name="Researcher", key=researcher, role="researcher")
    assert own.name == "Researcher"


def test_a_name_granted_before_computes_no_reading(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost: a new name's readings are computed once (three skeletons, two keys), for the
    principals' names and the agents' alike, and compared with two look-ups in each; a name this
    Gate granted before is one look-up, and computes nothing."""
    calls: list[str] = []
    real = _confusables.skeleton

    def counted(text: str) -> str:
        if text in ("helper", "reviewer"):  # not the principals' names, read once per policy
            calls.append(text)
        return real(text)

    monkeypatch.setattr(_confusables, "skeleton", counted)
    _confusables.readings.cache_clear()
    _delegate(team, "helper")
    assert len(calls) == 3
    for _ in range(3):
        _delegate(team, "helper")
    assert len(calls) == 3
    _delegate(team, "reviewer")
    assert len(calls) == 6


def test_the_names_kept_are_bounded(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ``AGENT_NAMES_KEPT`` names are kept in memory, the latest granted: the oldest is
    forgotten there, and a name reading as it is still refused, by the store's record of the names
    granted (``agentgate_agent_names``; tests/test_gate_r69_store_names.py)."""
    monkeypatch.setattr(_delegation, "AGENT_NAMES_KEPT", 2)
    for name in ("helper", "writer", "editor"):
        _delegate(team, name)
    assert "helper" not in team.gate._agent_names
    with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
        _delegate(team, "heIper")
    with pytest.raises(Denied, match="'edItor' reads as 'editor'"):
        _delegate(team, "edItor")
