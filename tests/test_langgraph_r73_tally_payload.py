"""The payload a LangGraph run asks again with, for a quorum of two after the first yes: its
``reasons`` are those its ``approval_required`` entry records, without the quorum's tally
("approval quorum: 1 of 2 given", the decision's reason since review R73), so that ``agentgate
approval sign --store`` does not refuse it as changed on its way. Every store and checkpointer,
sync and async (``rig``)."""

from __future__ import annotations

from langgraph.types import Command
from test_langgraph_resume_after_policy_change import (
    GO,
    KEYS,
    PUBLISHER,
    Rig,
    begin,
    gate_on,
    paused,
    policy,
    rig,
    sign,
)

from agentgate.gate._records import TALLY

__all__ = ["rig"]  # the fixture, imported for pytest to find


def test_the_payload_asked_again_after_one_of_two_yes_shows_no_tally(rig: Rig) -> None:
    """Review R73's review: resumed with the first of two approvals, the run asks again with the
    reasons it first asked with, the tally left out (``_asking``), and ``approved_by`` naming the
    one approver counted; with the filter gone the payload grew "approval quorum: 1 of 2 given;
    1 more needed", which its audit entry does not hold."""
    identity = begin(rig, policy(gates={"publish": gate_on(["dana", "erin"], quorum=2)}))
    asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
    again = paused(rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity))
    request = again["request"]
    assert request["id"] == asked["request"]["id"]
    assert request["approved_by"] == [KEYS["dana"].did]
    assert not [reason for reason in request["reasons"] if TALLY.match(reason)], request["reasons"]
    assert request["reasons"] == asked["request"]["reasons"]
