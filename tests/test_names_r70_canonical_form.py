"""A free agent name is granted in the form it is compared in, NFKC (review R70).

Since review R69 a free agent name holds its readings (NFKC, case folded, confusables) on the
store, the first granted winning: until review R70 ``ﬁler`` (U+FB01 LATIN SMALL LIGATURE FI),
granted first, kept the plain ``filer`` out for as long as the store lives, and approvers and the
audit log showed the ligature. ``Gate.issue`` and ``Gate.delegate`` now refuse a free name that
NFKC changes, with an ``InputError`` naming the form to write, so the name registered is the
canonical one. A principal's name and its variants keep the principal rule (``inherited_identity``,
tests/test_gate_r66_lookalike_names.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.errors import InputError
from agentgate.keys import SigningKey


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def _delegate(team: Team, name: str) -> str:
    return team.gate.delegate(
        team.supervisor,
        name=name,
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    ).name


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("\ufb01ler", "filer"),  # LATIN SMALL LIGATURE FI
        ("\uff52\uff45\uff53\uff45\uff41\uff52\uff43\uff48\uff45\uff52-bot", "researcher-bot"),  # full width
        ("agent\u00b2", "agent2"),  # SUPERSCRIPT TWO
        ("\u30a8\u30fc\u30b8\u30a7\u30f3\u30c8\uff11", "\u30a8\u30fc\u30b8\u30a7\u30f3\u30c8" + "1"),
    ],
)
def test_a_free_name_nfkc_changes_is_refused_naming_its_form(team: Team, name: str, form: str) -> None:
    """Review R70: a name NFKC changes was delegated to, and held its readings against the
    plain form granted after it."""
    with pytest.raises(InputError, match=f"write {form!r}") as refused:
        _delegate(team, name)
    assert "NFKC" in str(refused.value)
    assert _delegate(team, form) == form


def test_issue_refuses_it_too(team: Team) -> None:
    """Review R70: ``Gate.issue`` under ``ﬁler`` was granted."""
    with pytest.raises(InputError, match="an agent's name '\ufb01ler' is not in Unicode's NFKC form"):
        team.gate.issue(team.keys["root"], name="\ufb01ler", key=team.keys["researcher"], role="researcher")
    assert (
        team.gate.issue(team.keys["root"], name="filer", key=team.keys["researcher"], role="researcher").name
        == "filer"
    )


def test_names_in_nfkc_form_are_granted(team: Team) -> None:
    """The rule refuses only a form NFKC changes: accented Latin (composed), Han and Hangul pass."""
    for name in ("agent-\u00e9t\u00e9", "\u7814\u7a76\u8005-alice", "\uc5f0\uad6c\uc6d0_bot"):
        assert _delegate(team, name) == name
