"""The R96 reason for an approval of a request expired with its delegated grant (``approval not
counted: request 'ID' expired before the call was made``) is read in the decision's own
transaction (``ApprovalStore.get(tx=)``, 6063b243): on PostgreSQL a read beside it is a second
pool connection, which a pool of one never gives, and the resumed run waited out the pool's
timeout and returned no new interrupt (review R96's regression review: no test covered it)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import _calls, _make_team, _researcher

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.store._postgres import PostgresStore

GO = {"messages": [{"role": "user", "content": "go"}]}


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
    ask = delegation_tool(
        team.gate,
        name="researcher",
        agent=_researcher(team),
        key=team.keys["researcher"],
        capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"],
        ttl=timedelta(seconds=3),
    )
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))])
    sup = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}

    def run(value: object) -> dict:
        if use_async:
            return asyncio.run(sup.ainvoke(value, config, context=team.supervisor))
        return sup.invoke(value, config, context=team.supervisor)

    (paused,) = run(GO)["__interrupt__"]
    request = paused.value["request"]
    approval = team.gate.approve(paused.value, team.keys["dana"])
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 5)  # the delegated grant expired

    result = run(Command(resume=approval))
    assert "__interrupt__" in result, result["messages"][-1]
    (again,) = result["__interrupt__"]
    assert any(
        f"request {request['id']!r} expired before the call was made" in reason
        for reason in again.value["request"]["reasons"]
    )
    assert [r.id for r in team.gate.approvals.open_records()] == [again.value["request"]["id"]]
    team.gate.close()
