"""Review R61: an approval resumed after a restart with LangGraph's ``PostgresSaver`` and the
PostgreSQL store, both on the session's real PostgreSQL server: new process objects (a new Gate,
a new saver) over the same database."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.types import Command
from test_langgraph import NAMES, Team, _entries, _policy_text, _publisher

from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy

pytestmark = pytest.mark.postgres

GO = {"messages": [{"role": "user", "content": "go"}]}


def test_a_bad_approval_after_a_restart_is_refused_and_a_good_one_resumes(
    tmp_path: Path, postgres_url: str
) -> None:
    """Review R61: after the restart the requester's own approval is refused with its reason in
    the new interrupt, under the same request (asked once; an entry of its own for the refused
    approval), and dana's approval then runs the call once; nothing is left open."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from agentgate.store._postgres import PostgresStore

    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 1_000_000), source="team.yaml")
    log_key = SigningKey.generate()
    gate = Gate(policy, PostgresStore(postgres_url), log_key=log_key)
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    team = Team(gate, keys, supervisor, tmp_path, [])
    config = {"configurable": {"thread_id": "pg-r61"}}
    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
        paused = _publisher(gate, saver, team).invoke(GO, config, context=supervisor)
    payload = paused["__interrupt__"][0].value
    gate.close()

    gate = Gate(policy, PostgresStore(postgres_url), log_key=log_key)  # a new process
    try:
        with PostgresSaver.from_conn_string(postgres_url) as saver:
            own = Approval.sign(payload, keys["supervisor"]).to_dict()  # Gate.approve refuses it (R71)
            again = _publisher(gate, saver, team).invoke(Command(resume=own), config, context=supervisor)
            (pending,) = again["__interrupt__"]
            assert pending.value["request"]["id"] == payload["request"]["id"]
            assert (
                "approval not counted: the approver must not be the requester"
                in pending.value["request"]["reasons"]
            )
            assert team.ran == []
            done = _publisher(gate, saver, team).invoke(
                Command(resume=gate.approve(pending.value, keys["dana"])), config, context=supervisor
            )
        assert "__interrupt__" not in done and team.ran == ["publish:reports/final"]
        kinds = [e.kind for e in _entries(gate)]
        # The request's own entry, and one for the refused approval each time the run presented
        # it: the last resume replays the node's earlier answer first (docs/langgraph.md).
        assert kinds.count("approval_required") == 3 and kinds.count("approval_given") == 1
        assert gate.approvals.open_records() == []
        assert gate.verify().ok
    finally:
        gate.close()
