"""A sub-agent's approval request lasts no longer than the delegated grant it was asked under
(review R96): resumed after that grant expired, the delegation issues a fresh grant and the call
is asked for again, and the request on the expired grant is no longer open (listed or signable);
the new interrupt says why the approval given was not counted."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import _calls, _make_team, _researcher

from agentgate.errors import InputError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

GO = {"messages": [{"role": "user", "content": "go"}]}


@pytest.mark.parametrize("use_async", [False, True])
def test_a_request_on_an_expired_delegated_grant_is_not_left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    team = _make_team(tmp_path)
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
    # The request ends with the sub-agent's grant, not the policy's 600 s later.
    assert request["expires_at"] <= time.time() + 3
    approval = team.gate.approve(paused.value, team.keys["dana"])
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 5)  # the approver took longer than the grant

    (again,) = run(Command(resume=approval))["__interrupt__"]
    assert again.value["request"]["grant"] != request["grant"]  # a fresh grant, a new request
    assert any(
        f"request {request['id']!r} expired before the call was made" in reason
        for reason in again.value["request"]["reasons"]
    )
    assert [r.id for r in team.gate.approvals.open_records()] == [again.value["request"]["id"]]
    with pytest.raises(InputError, match="expired"):
        team.gate.approve(paused.value, team.keys["dana"])
    team.gate.close()
