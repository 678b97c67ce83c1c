"""Agent names holding characters newer than the confusables table (review R69).

The table agentgate reads names by is Unicode's ``confusables.txt`` 13.0.0; Python's
``unicodedata`` is 14.0.0 on 3.11, 15.0.0 on 3.12, 15.1.0 on 3.13. A character Unicode assigned
after 13.0.0 has no entry in the table whatever it looks like, so a name holding one is compared
as itself: ``rep\\ua7c1rter`` (U+A7C1 LATIN SMALL LETTER OLD POLISH O, Unicode 14.0, Latin, so
no mix of scripts) was granted beside ``reporter``, and what it reads as is unknown to the Gate.
Characters assigned by 13.0.0 read the same under every later Python: Unicode keeps their
normalization and case folding stable. ``Gate.issue`` and ``Gate.delegate`` now refuse a name
holding a newer character (``InputError`` naming it), and each decision refuses an identity
under one, as it refuses any name those two would not grant."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_gate_r67_unbound_names import _outside_grant
from test_langgraph import Team, _make_team

from agentgate import _confusables
from agentgate._names import agent_name_refused, check_agent_name
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

OLD_POLISH_O = "\ua7c1"  # Unicode 14.0
NEWER_NAME = f"rep{OLD_POLISH_O}rter"


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def test_the_character_is_latin_and_not_in_the_table() -> None:
    """Why it passed: the letter is Latin (no mix of scripts) and the 13.0.0 table has no entry
    for it, so the name reads only as itself."""
    assert unicodedata.name(OLD_POLISH_O) == "LATIN SMALL LETTER OLD POLISH O"
    assert ord(OLD_POLISH_O) not in _confusables._table()
    assert _confusables.readings(NEWER_NAME) == {NEWER_NAME}


def test_a_name_with_a_character_newer_than_the_table_is_not_delegated(team: Team) -> None:
    """Review R69: ``Gate.delegate(name="rep\\ua7c1rter")`` was granted."""
    with pytest.raises(InputError) as refused:
        team.gate.delegate(
            team.supervisor,
            name=NEWER_NAME,
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    message = str(refused.value)
    assert "U+A7C1 LATIN SMALL LETTER OLD POLISH O at character 4" in message
    assert "after Unicode 13.0.0" in message


def test_a_decision_refuses_an_identity_under_such_a_name(team: Team) -> None:
    """Review R69: a grant that binds no name, presented under the name, was decided and
    recorded under it. Refused ``inherited_identity``, as a name Gate.issue would not grant."""
    key = team.keys["supervisor"]
    decision = team.gate.authorize(
        AgentIdentity(NEWER_NAME, key, _outside_grant(team, key)), Call.tool("search", {"query": "q"})
    )
    assert not decision.allowed
    assert [f.code for f in decision.findings] == ["inherited_identity"]
    assert "after Unicode 13.0.0" in decision.findings[0].message


@pytest.mark.parametrize("name", ["researcher-2", "\u0433\u0435\u0440\u043c\u0430\u043d", "\u6f22\u5b57-bot"])
def test_names_of_characters_the_table_knows_pass(name: str) -> None:
    """ASCII, Cyrillic and Han names of characters assigned by 13.0.0 pass as before."""
    check_agent_name(name, "an agent's")
    assert agent_name_refused(name, "an agent's") is None


def test_the_shipped_ranges_are_what_unicode_13_assigned() -> None:
    """The ranges are Unicode 13.0.0's assigned code points (general category other than Cn,
    from Python 3.10's ``unicodedata`` 13.0.0): 283,440 of them, every one still assigned in
    this Python, every source of the table among them; and this Python's ``unicodedata`` knows
    characters the ranges do not (it is newer), the case they are for."""
    bounds = _confusables._assigned_bounds()
    spans = list(zip(bounds[::2], bounds[1::2], strict=True))
    assert sum(end - start for start, end in spans) == 283_440
    assert all(unicodedata.category(chr(cp)) != "Cn" for start, end in spans for cp in range(start, end))
    assert all(_confusables.newer_than_table(chr(cp)) is None for cp in _confusables._table())
    said = _confusables.newer_than_table(f"ab{OLD_POLISH_O}")
    assert said == "U+A7C1 LATIN SMALL LETTER OLD POLISH O at character 3"
