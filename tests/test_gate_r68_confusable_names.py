"""Agent names that read as a principal's in another script (review R68).

Review R67 refused a name whose letters mix scripts (``rеsearcher`` with one Cyrillic ``е``); a
name wholly in another script that looks Latin passed: ``геѕеагсһег``, all Cyrillic, was
delegated to a new key, audited as ``agent:геѕеагсһег`` and shown to approvers, who read it as
the researcher. The Gate now compares an agent's name with the principals' names as Unicode's
confusables skeleton (TR39, ``agentgate._confusables``), so such a name on another key is refused
as ``researcher`` there is: ``implicit_trust_inheritance``/``inherited_identity``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_gate_r67_unbound_names import _outside_grant
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate import _confusables
from agentgate._names import mixed_scripts
from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity
from agentgate.gate._checks import principal_named
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})
CYRILLIC_RESEARCHER = "\u0433\u0435\u0455\u0435\u0430\u0433\u0441\u04bb\u0435\u0433"  # геѕеагсһег


def test_the_name_is_in_one_script() -> None:
    """The name mixes no scripts: review R67's rule lets it through."""
    assert mixed_scripts(CYRILLIC_RESEARCHER) is None


def test_a_name_reading_as_a_principals_is_not_delegated(team: Team) -> None:
    """Review R68: ``Gate.delegate(name="геѕеагсһег")`` (all Cyrillic) to a new key was granted,
    and recorded as an agent a reader takes for the researcher."""
    with pytest.raises(Denied) as refused:
        team.gate.delegate(
            team.supervisor,
            name=CYRILLIC_RESEARCHER,
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    assert refused.value.finding is not None
    assert refused.value.finding.code == "inherited_identity"
    assert "would act, and be recorded, as principal" in str(refused.value)


def test_a_name_reading_as_a_principals_is_not_issued(team: Team) -> None:
    """Review R68: ``Gate.issue(name="геѕеагсһег")`` on the supervisor's key was issued."""
    with pytest.raises(Denied, match="as principal researcher"):
        team.gate.issue(
            team.keys["root"], name=CYRILLIC_RESEARCHER, key=team.keys["supervisor"], role="supervisor"
        )


def test_a_name_reading_as_a_principals_on_an_unbound_grant_is_refused(team: Team) -> None:
    """Review R68: a grant that binds no name, presented as ``геѕеагсһег`` on the supervisor's
    key, was decided and recorded under that name. Refused ``inherited_identity``."""
    key = team.keys["supervisor"]
    refused = team.gate.authorize(AgentIdentity(CYRILLIC_RESEARCHER, key, _outside_grant(team, key)), SEARCH)
    assert not refused.allowed
    assert [f.code for f in refused.findings] == ["inherited_identity"]


def test_a_principals_own_name_and_a_name_seen_before_compute_no_skeleton(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case costs nothing: a principal's exact name is looked up, and a free name's
    readings are computed once (``_confusables.readings`` keeps them), not on every decision."""
    calls: list[str] = []
    real = _confusables.skeleton

    def counted(text: str) -> str:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(_confusables, "skeleton", counted)
    _confusables.readings.cache_clear()
    assert principal_named(team.gate.policy, "helper-7") is None  # reads it, and the principals' names
    assert calls
    calls.clear()
    for _ in range(5):
        assert principal_named(team.gate.policy, "researcher") == "researcher"
        assert principal_named(team.gate.policy, "helper-7") is None
    assert calls == []
