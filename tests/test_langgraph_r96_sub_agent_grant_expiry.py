"""A sub-agent's approval request lasts no longer than the delegated grant it was asked under
(review R96): resumed after that grant expired, the delegation issues a fresh grant and the call
is asked for again, and the request on the expired grant is no longer open (listed or signable);
the new interrupt says why the approval given was not counted."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import Team, _calls, _make_team, _researcher

from agentgate.errors import InputError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

GO = {"messages": [{"role": "user", "content": "go"}]}


def resumed_past_the_delegated_grant(
    team: Team, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> tuple[Any, dict[str, Any]]:
    """The supervisor's delegation to a researcher whose grant lasts 3 s pauses for an approval of
    the researcher's publish, dana signs it, the grant expires (time + 5 s) and the run is resumed
    with the approval: the first interrupt and the resumed run's result (also used by
    test_langgraph_r96_expired_request_answered and test_langgraph_r96_pg_pool_of_one)."""
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

    def run(value: object) -> dict[str, Any]:
        if use_async:
            return asyncio.run(sup.ainvoke(value, config, context=team.supervisor))
        return sup.invoke(value, config, context=team.supervisor)

    (paused,) = run(GO)["__interrupt__"]
    approval = team.gate.approve(paused.value, team.keys["dana"])
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 5)  # the approver took longer than the grant
    return paused, run(Command(resume=approval))


@pytest.mark.parametrize("use_async", [False, True])
def test_a_request_on_an_expired_delegated_grant_is_not_left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    team = _make_team(tmp_path)
    paused, result = resumed_past_the_delegated_grant(team, monkeypatch, use_async)
    request = paused.value["request"]
    # The request ends with the sub-agent's grant (3 s; time is now 5 s on), not the policy's 600 s later.
    assert request["expires_at"] <= time.time() - 2
    (again,) = result["__interrupt__"]
    assert again.value["request"]["grant"] != request["grant"]  # a fresh grant, a new request
    assert any(
        f"request {request['id']!r} expired before the call was made" in reason
        for reason in again.value["request"]["reasons"]
    )
    assert [r.id for r in team.gate.approvals.open_records()] == [again.value["request"]["id"]]
    with pytest.raises(InputError, match="expired"):
        team.gate.approve(paused.value, team.keys["dana"])
    team.gate.close()
