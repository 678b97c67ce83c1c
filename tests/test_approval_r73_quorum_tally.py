"""How many of a quorum's approvals are given, said where a person or a model reads it: the
reasons of a decision that still waits for approvals, and ``agentgate approval sign --store``'s
description of the request it signs (review R73: until then neither said "1 of 2 given", and
the signer could not tell whether their yes completes the request). A real Gate on a SQLite file
or a PostgreSQL database, the CLI's main run with argv."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _approval_rig import ApprovalRig
from test_cli_approval_r72_closed import TWO

from agentgate.gate import Approval, Authorization


class _Rig(ApprovalRig):
    """A Gate whose refund of 800 needs two of lead and lead2 (``TWO``), asked once."""

    def __init__(self, path: Path, url: str | None) -> None:
        super().__init__(path, TWO, url)

    def vote(self, who: str, payload: dict[str, Any]) -> Authorization:
        """``who``'s yes presented to the Gate, as a resumed run presents it."""
        approval = Approval.parse(self.gate.approve(payload, self.keys[who]))
        return self.gate.authorize(self.agent, self.call, call_id="call-1", approval=approval)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def two(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Rig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    rig = _Rig(tmp_path, url)
    yield rig
    rig.gate.close()


def _votes_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("  votes ")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_pending_decision_says_how_many_of_its_quorum_are_given(two: _Rig) -> None:
    """Review R73: a call of a quorum-2 gate asked for the first time says "0 of 2 given", and
    with one vote counted "1 of 2 given", in its reasons and in what the model is told
    (``explain``); until then its reasons named the gate and approvers only."""
    assert "approval quorum: 0 of 2 given; 2 more needed" in two.asked.reasons
    voted = two.vote("lead", two.asked.approval_payload())
    assert voted.needs_approval
    assert "approval quorum: 1 of 2 given; 1 more needed" in voted.reasons
    assert "approval quorum: 0 of 2 given; 2 more needed" not in voted.reasons
    assert "1 of 2 given" in voted.explain()
    # The call decided again without an approval (a resumed node runs again) says the same.
    again = two.gate.authorize(two.agent, two.call, call_id="call-1")
    assert "approval quorum: 1 of 2 given; 1 more needed" in again.reasons


def test_sign_with_the_store_says_whether_this_yes_completes_the_quorum(
    two: _Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: ``approval sign --store`` reads the request's quorum and counted votes from the
    store and says, in a ``votes`` line, how many are given and what the signer's yes makes of
    it: one more needed after lead's first yes, the quorum complete with lead2's."""
    code, _, err = two.sign(capsys, two.asked.approval_payload(), "lead")
    assert code == 0, err
    assert _votes_line(err).split(None, 1)[1].startswith("0 of 2 given; this yes makes 1 of 2: 1 more needed")
    voted = two.vote("lead", two.asked.approval_payload())
    code, _, err = two.sign(capsys, voted.approval_payload(), "lead2")
    assert code == 0, err
    assert _votes_line(err).split(None, 1)[1].startswith("1 of 2 given; this yes completes the quorum")
