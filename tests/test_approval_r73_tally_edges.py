"""Where the quorum tally of review R73 ("approval quorum: 1 of 2 given") must not reach, and
what the ``votes`` line of ``agentgate approval sign --store`` says of a yes that would not count
(review R73's review). A real Gate on a SQLite file or a PostgreSQL database, the CLI's main run
with argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_approval_r73_quorum_tally import _Rig, _votes_line, two

from agentgate.gate._records import TALLY
from agentgate.keys import SigningKey, save_key

__all__ = ["two"]  # the fixture, imported for pytest to find


def test_a_declined_quorum_request_logs_no_tally(two: _Rig) -> None:
    """Review R73: ``Gate.decline`` of a call waiting for a quorum of two writes a ``deny`` entry
    of the reasons the answer had; the tally in them ("approval quorum: 1 of 2 given") is the
    answer's only, never the log's (the log holds each vote as an ``approval_given`` entry)."""
    voted = two.vote("lead", two.asked.approval_payload())
    assert any(TALLY.match(reason) for reason in voted.reasons)
    refused = two.gate.decline(voted, "nobody else answered")
    assert refused.audit_index is not None
    entry = two.gate.audit.entry(refused.audit_index)
    assert entry.kind == "deny"
    assert "approval declined: nobody else answered" in entry.reasons
    assert not [reason for reason in entry.reasons if TALLY.match(reason)], entry.reasons


def test_sign_with_the_store_does_not_count_a_key_no_approver_holds(
    two: _Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: the ``votes`` line of a yes signed with a key that is none of the approvers the
    store last counted the request among says that yes is not counted, never "this yes makes 1 of
    2" or "this yes completes the quorum", which the resumed run refuses."""
    save_key(SigningKey.generate(), tmp_path / "k", "stranger")
    code, _, err = two.sign(capsys, two.asked.approval_payload(), "stranger")
    assert code == 0, err
    line = _votes_line(err).split(None, 1)[1]
    assert line.startswith("0 of 2 given; this yes is not counted"), line
    voted = two.vote("lead", two.asked.approval_payload())
    code, _, err = two.sign(capsys, voted.approval_payload(), "stranger")
    assert code == 0, err
    line = _votes_line(err).split(None, 1)[1]
    assert line.startswith("1 of 2 given; this yes is not counted"), line
