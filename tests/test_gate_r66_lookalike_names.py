"""A case or compatibility variant of a principal's name at ``Gate.issue`` and ``Gate.delegate``
(review R66).

Since review R65 a grant under a principal's name to another key is refused
(``inherited_identity``): the agent would act, and be recorded (``agent:NAME``), as that
principal. The names were compared exactly: ``name="Researcher"``, ``"RESEARCHER"`` or the
full-width ``"ｒｅｓｅａｒｃｈｅｒ"`` on a new key was granted, and approvers and the audit log's
readers were shown a name they read as the researcher's. Names are now compared as NFKC, case
folded (a policy's principal names are ASCII); other look-alikes (another script's letters) are
not: docs/concepts.md, "Agent name"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.errors import Denied
from agentgate.keys import SigningKey

VARIANTS = ["Researcher", "RESEARCHER", "\uff52\uff45\uff53\uff45\uff41\uff52\uff43\uff48\uff45\uff52"]


def _granted(team: Team, name: str) -> list[str]:
    team.gate.flush()
    return [e.kind for e in team.gate.audit.entries() if e.resource == f"agent:{name}"]


def _assert_read_as_researcher(team: Team, refused: Denied, name: str, key: SigningKey) -> None:
    finding = refused.finding
    assert finding is not None
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert f"named {name} on key {key.did}" in finding.message
    assert "principal researcher" in finding.message and team.keys["researcher"].did in finding.message
    assert refused.audit_index is not None
    assert _granted(team, name) == ["deny"]


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_of_a_principals_name_is_not_delegated_to_another_key(team: Team, name: str) -> None:
    """Review R66: ``Gate.delegate(name="Researcher", key=<a new key>)`` was granted and audited
    as ``agent:Researcher``. Refused as the exact name is."""
    key = SigningKey.generate()
    with pytest.raises(Denied) as refused:
        team.gate.delegate(
            team.supervisor, name=name, key=key, capabilities=["tool:search"], ttl=timedelta(minutes=1)
        )
    _assert_read_as_researcher(team, refused.value, name, key)


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_of_a_principals_name_is_not_issued_to_another_key(team: Team, name: str) -> None:
    """Review R66: ``Gate.issue(name="Researcher", key=<the supervisor's key>)`` was issued. Refused."""
    key = team.keys["supervisor"]
    with pytest.raises(Denied) as refused:
        team.gate.issue(team.keys["root"], name=name, key=key, role="supervisor")
    _assert_read_as_researcher(team, refused.value, name, key)


def test_a_variant_on_the_principals_own_key_and_other_names_are_granted(team: Team) -> None:
    """Review R66: the comparison refuses only another key: the researcher's own key under
    "Researcher", and names no principal's folds to ("research", "researcher2"), are granted."""
    own = team.gate.issue(
        team.keys["root"], name="Researcher", key=team.keys["researcher"], role="researcher"
    )
    assert own.name == "Researcher"
    for name in ("research", "researcher2"):
        team.gate.delegate(
            team.supervisor,
            name=name,
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
        assert _granted(team, name) == ["allow"]
