"""``ApprovalStore.approve`` with a call hash that is not the request's (review R93): refused
before anything of the request is written. Until review R93 ``rule``'s re-tally ran first and
brought the request to the other call's quorum, counted voters and state; a caller that caught
the ``Denied`` (the Gate counts such a vote as not counted) committed it.

Real components: the Gate's SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_approvals_r93_forged_request_id import _office, _wire_with_two_votes

from agentgate.errors import Denied
from agentgate.store.approvals import QuorumRule


def test_a_vote_for_another_call_leaves_the_request_as_it_was(tmp_path: Path) -> None:
    office = _office(tmp_path, pay_quorum=2)
    try:
        approvals = office.gate.approvals
        wire_id = _wire_with_two_votes(office)
        before = (approvals.get(wire_id), approvals.counted_among(wire_id))
        rule = QuorumRule(2, frozenset({office.keys["carol"].did, office.keys["dave"].did}))
        # As the Gate does: the refusal caught (a vote not counted), the transaction committed.
        with office.gate.store.transaction() as tx, pytest.raises(Denied, match="given for another call"):
            approvals.approve(wire_id, office.keys["carol"].did, call_hash="0" * 64, tx=tx, rule=rule)
        assert (approvals.get(wire_id), approvals.counted_among(wire_id)) == before
    finally:
        office.gate.close()
