"""The R96 reason for an approval of a request expired with its delegated grant (``approval not
counted: request 'ID' expired before the call was made``) is read in the decision's own
transaction (``ApprovalStore.get(tx=)``, 6063b243): on PostgreSQL a read beside it is a second
pool connection, which a pool of one never gives, and the resumed run waited out the pool's
timeout and returned no new interrupt (review R96's regression review: no test covered it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_langgraph import _make_team
from test_langgraph_r96_sub_agent_grant_expiry import resumed_past_the_delegated_grant

from agentgate.gate import Gate
from agentgate.store._postgres import PostgresStore


@pytest.mark.postgres
@pytest.mark.parametrize("use_async", [False, True])
def test_the_expired_request_reason_is_read_on_a_pool_of_one(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    team = _make_team(tmp_path)
    team.gate.close()
    team.gate = Gate(team.gate.policy, PostgresStore(postgres_url, max_size=1, timeout_s=2))
    team.supervisor = team.gate.issue(
        team.keys["root"], name="supervisor", key=team.keys["supervisor"], role="supervisor"
    )
    paused, result = resumed_past_the_delegated_grant(team, monkeypatch, use_async)
    request = paused.value["request"]
    assert "__interrupt__" in result, result["messages"][-1]
    (again,) = result["__interrupt__"]
    assert any(
        f"request {request['id']!r} expired before the call was made" in reason
        for reason in again.value["request"]["reasons"]
    )
    assert [r.id for r in team.gate.approvals.open_records()] == [again.value["request"]["id"]]
    team.gate.close()
