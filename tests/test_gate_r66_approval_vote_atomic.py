"""An approver's vote and its record are one transaction; a failure after it is answered by
asking again (review R66).

Under a quorum of two, ``Gate.authorize`` records each valid approval as a vote
(``approval_votes``, the request's state) and its ``approval_given`` entry in one transaction,
then decides the call in another. A failure is injected on a real SQLite file by a trigger that
refuses one kind of audit entry: refusing ``approval_given`` must leave no vote counted; refusing
the ``allow`` after the quorum was reached must leave the votes (they are on record) and let the
same approval presented again allow the call once, with no vote or entry twice.
"""

from __future__ import annotations

import pytest
from _raw_sqlite import opened
from test_gate_run import Setup
from test_gate_run import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import AgentGateError
from agentgate.gate import Approval


def _refuse(setup: Setup, kind: str) -> None:
    """Make the store refuse to append an audit entry of ``kind`` (a trigger, as a full disk or a
    lost connection would fail that statement)."""
    with opened(setup.path / "agentgate.db") as conn:
        conn.execute(
            f"CREATE TRIGGER refuse_{kind} BEFORE INSERT ON audit_log "
            f"WHEN json_extract(CAST(NEW.entry AS TEXT), '$.kind') = '{kind}' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )


def _allow_again(setup: Setup, kind: str) -> None:
    with opened(setup.path / "agentgate.db") as conn:
        conn.execute(f"DROP TRIGGER refuse_{kind}")


def _votes(setup: Setup, request: str) -> list[str]:
    return [
        str(r[0])
        for r in setup.gate.store.query(
            "SELECT approver FROM approval_votes WHERE approval_id = ? ORDER BY approver", (request,)
        )
    ]


def test_a_vote_whose_entry_fails_is_not_counted_and_a_decision_that_fails_is_taken_again(
    setup: Setup,
) -> None:
    """Review R66: checked, not changed: no failure between the steps leaves a vote counted
    without its ``approval_given`` entry, and a failure between the vote that reaches the quorum
    and the ``allow`` is recovered by presenting the approval again (allowed once, each vote and
    entry once)."""
    call = Call.tool("transfer", {"amount": 10})
    asked = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t")
    assert asked.needs_approval and asked.request is not None
    request = asked.request["id"]
    first = Approval.sign(asked.approval_payload(), setup.keys["lead"])

    _refuse(setup, "approval_given")
    with pytest.raises(AgentGateError):
        setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=first)
    assert _votes(setup, request) == []
    _allow_again(setup, "approval_given")

    half = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=first)
    assert half.needs_approval and not half.allowed, half.explain()
    second = Approval.sign(half.approval_payload(), setup.keys["second"])

    _refuse(setup, "allow")
    with pytest.raises(AgentGateError):
        setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=second)
    _allow_again(setup, "allow")
    assert _votes(setup, request) == sorted([setup.keys["lead"].did, setup.keys["second"].did])

    auth = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=second)
    assert auth.allowed, auth.explain()
    entries = setup.entries()
    given = sorted(str(e.approver) for e in entries if e.kind == "approval_given")
    assert given == sorted([setup.keys["lead"].did, setup.keys["second"].did])
    assert [e.kind for e in entries if e.resource == "tool:transfer"].count("allow") == 1
    again = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=second)
    assert not again.allowed, "an approval is used once"
