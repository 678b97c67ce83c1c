"""Agent names whose letters mix scripts (review R67).

Since review R66 the Gate compares an agent's name with the principals' names as NFKC, case
folded, so ``Researcher`` or a full-width ``ｒｅｓｅａｒｃｈｅｒ`` on another key is refused; letters
of another script that look alike were not: ``rеsearcher`` with a Cyrillic ``е`` (U+0435) was
granted to a new key, audited as ``agent:rеsearcher`` and shown to approvers, who read it as the
researcher. No library the project depends on keeps Unicode's confusables table (TR39), so the
rule is the narrower one TR39's restriction levels start from: a name's letters are of one
script (Latin may join Han, Hiragana, Katakana, Hangul or Bopomofo, as Japanese, Chinese and
Korean names mix them). A name in one other script that looks Latin (all Cyrillic) is not
caught: docs/concepts.md, "Agent name"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from test_gate_r67_unbound_names import _outside_grant
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate._names import mixed_scripts
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})
CYRILLIC_E = "r\u0435searcher"  # the second letter is CYRILLIC SMALL LETTER IE
GREEK_O = "superv\u03bfisor"  # GREEK SMALL LETTER OMICRON


@pytest.mark.parametrize(
    ("name", "scripts"),
    [
        (CYRILLIC_E, ("LATIN", "CYRILLIC")),
        (GREEK_O, ("LATIN", "GREEK")),
        ("\u0430lice", ("CYRILLIC", "LATIN")),
    ],
)
def test_a_name_mixing_scripts_is_not_delegated(team: Team, name: str, scripts: tuple[str, str]) -> None:
    """Review R67: ``Gate.delegate(name="rеsearcher")`` (a Cyrillic ``е``) to a new key was
    granted. Refused with an ``InputError`` naming the letter, its place and both scripts."""
    with pytest.raises(InputError) as refused:
        team.gate.delegate(
            team.supervisor,
            name=name,
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    message = str(refused.value)
    assert (
        f"a sub-agent's name {name!r} mixes {scripts[0].title()} and {scripts[1].title()} letters" in message
    )
    assert "U+" in message and "at character" in message


def test_a_name_mixing_scripts_is_not_issued(team: Team) -> None:
    """Review R67: ``Gate.issue(name="rеsearcher")`` on the supervisor's key was issued."""
    with pytest.raises(
        InputError, match=re.escape(f"an agent's name {CYRILLIC_E!r} mixes Latin and Cyrillic letters")
    ):
        team.gate.issue(team.keys["root"], name=CYRILLIC_E, key=team.keys["supervisor"], role="supervisor")


def test_a_name_mixing_scripts_on_an_unbound_grant_is_refused(team: Team) -> None:
    """Review R67: a grant that binds no name, presented as ``rеsearcher``, was decided and
    recorded under it. Refused ``inherited_identity``, as a principal's own name there is."""
    key = team.keys["supervisor"]
    refused = team.gate.authorize(AgentIdentity(CYRILLIC_E, key, _outside_grant(team, key)), SEARCH)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert "mixes Latin and Cyrillic letters" in finding.message


@pytest.mark.parametrize(
    "name",
    [
        "researcher-2",
        "исследователь",  # one script
        "研究者-alice",  # Han with Latin
        "けんきゅう者",  # Hiragana with Han
        "연구원_bot",  # Hangul with Latin
        "agent-\u00e9t\u00e9",  # Latin with accents
    ],
)
def test_names_of_one_script_or_an_allowed_mix_are_delegated(team: Team, name: str) -> None:
    """The rule refuses a mix only: one script and the mixes TR39's highly restrictive level
    allows are granted. Full-width Latin is no mix either (``mixed_scripts`` reads the NFKC
    form), but since review R70 a name NFKC changes is refused for that, naming its plain form
    (tests/test_names_r70_canonical_form.py)."""
    assert mixed_scripts(name) is None
    helper = team.gate.delegate(
        team.supervisor,
        name=name,
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )
    assert helper.name == name
