"""Where the quorum tally of review R73 ("approval quorum: 1 of 2 given") must not reach, and
what the ``votes`` line of ``agentgate approval sign --store`` says of a yes that would not count
(review R73's review). A real Gate on a SQLite file or a PostgreSQL database, the CLI's main run
with argv."""

from __future__ import annotations

from test_approval_r73_quorum_tally import _Rig, two

from agentgate.gate._records import TALLY

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
