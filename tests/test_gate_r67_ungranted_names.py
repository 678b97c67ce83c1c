"""Names the Gate would not grant, presented on a grant that binds none (review R67).

``Gate.issue`` and ``Gate.delegate`` refuse a name holding an invisible, bidi or control
character or longer than ``MAX_NAME_CHARS`` (since review R56). A grant that binds no name
(``agentgate grant issue``, ``issue()``) was decided under any name its holder gave, and the
scheduler, approval requests and spans took it: ``researcher\\u200b`` on the supervisor's key read
as the researcher. And a name opening or ending with a space (``researcher ``) was granted by
both: it reads as the name without the space."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_gate_r67_unbound_names import _outside_grant
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("researcher\u200b", "U+200B at character 11"),
        ("re\u202esearcher", "U+202E at character 3"),
        ("researcher\n", "U+000A"),
        ("r" * 201, "at most 200 characters"),
        ("researcher ", "opens or ends with a space"),
        ("\u00a0researcher", "opens or ends with a space"),
    ],
)
def test_a_name_the_gate_would_not_grant_is_refused_on_an_unbound_grant(
    team: Team, name: str, said: str
) -> None:
    """Review R67: the supervisor's key with a grant made outside the Gate was decided, and
    recorded, under each of these names. Refused ``inherited_identity``, saying why."""
    key = team.keys["supervisor"]
    refused = team.gate.authorize(AgentIdentity(name, key, _outside_grant(team, key)), SEARCH)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert finding.message.startswith("the agent's name ")
    assert said.lower() in finding.message.lower()
    assert "Gate.issue and Gate.delegate grant no such name" in finding.message


@pytest.mark.parametrize("name", ["researcher ", " helper", "helper\u3000"])
def test_a_name_with_an_edge_space_is_not_granted(team: Team, name: str) -> None:
    """Review R67: ``Gate.delegate(name="researcher ")`` to a new key was granted, and recorded
    as ``agent:researcher `` (``principal_named`` folds case and width, not spaces)."""
    with pytest.raises(InputError, match="opens or ends with a space"):
        team.gate.delegate(
            team.supervisor,
            name=name,
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    with pytest.raises(InputError, match="opens or ends with a space"):
        team.gate.issue(team.keys["root"], name=name, key=team.keys["supervisor"], role="supervisor")


def test_plain_names_on_an_unbound_grant_are_decided(team: Team) -> None:
    """A name the Gate would grant is decided as before, spaces inside included."""
    key = team.keys["supervisor"]
    for name in ("worker-7", "night shift", "ночная-смена"):
        assert team.gate.authorize(AgentIdentity(name, key, _outside_grant(team, key)), SEARCH).allowed
