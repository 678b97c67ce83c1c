"""An allow decided while the event loop of its run shuts down is settled as a call that did not
run, and the resumed run runs it.

``asyncio.run(agent.ainvoke(...))`` returns once a tools node's call pauses for an approval while
the node's other calls are still left (LangGraph leaves them), and then cancels every task left:
the call's task and the task awaiting its decision's worker thread at once. The decision, made
in that thread, was recorded anyway, and could no longer be read: its allow had no outcome (its
call ``started``, its reservation held), and the resumed run refused the call as "started and its
outcome was never recorded"."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from test_langgraph import Team, _calls, _entries
from test_langgraph_r57_resume_threads import middleware_tool_node, one_at_a_time, tools_graph

from agentgate.gate import Authorization
from agentgate.integrations.langgraph import GateMiddleware

__all__ = ["one_at_a_time"]  # the fixture, imported for pytest

WAIT = 30.0  # a bound on waiting for an event that the test itself sets; never reached when it passes


def test_a_call_decided_while_its_loop_shuts_down_is_settled_and_runs_when_resumed(
    one_at_a_time: Team,
) -> None:
    """Review R57: an allow decided while asyncio.run shut its loop down was never settled."""
    team = one_at_a_time
    deciding, decide = threading.Event(), threading.Event()

    def search(query: str) -> str:
        team.ran.append(f"search:{query}")
        return f"results for {query}"

    def publish(path: str) -> str:
        team.ran.append(f"publish:{path}")
        return f"published {path}"

    middleware = GateMiddleware(team.gate, agent="supervisor")
    authorize_tool = middleware._authorize_tool

    def held(request: ToolCallRequest) -> Authorization:
        if request.tool_call["id"] == "search-1" and not decide.is_set():  # the first run's only
            deciding.set()
            assert decide.wait(WAIT)
        return authorize_tool(request)

    middleware._authorize_tool = held  # type: ignore[method-assign]
    agent = tools_graph(middleware_tool_node(middleware, search, publish))
    config: Any = {"configurable": {"thread_id": "shut"}}
    answer = _calls(
        ("publish", {"path": "reports/q"}), ("search", {"query": "q0"}), ("search", {"query": "q1"})
    )

    async def first_run() -> dict[str, Any]:
        # One worker thread: the publish call is decided first and pauses the run; the first
        # search's decision is under way in the thread when the run returns and the loop ends.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        paused: dict[str, Any] = await agent.ainvoke({"messages": [answer]}, config, context=team.supervisor)
        assert deciding.wait(WAIT)
        decide.set()  # decided as asyncio.run cancels the tasks left
        return paused

    paused = asyncio.run(first_run())
    searches = [e.kind for e in _entries(team.gate) if e.resource == "tool:search"]
    assert searches.count("allow") == searches.count("outcome")  # every allow settled

    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    done = asyncio.run(agent.ainvoke(Command(resume=approval), config, context=team.supervisor))
    answers = {m.tool_call_id: m for m in done["messages"] if isinstance(m, ToolMessage)}
    assert [answers[i].status for i in ("publish-0", "search-1", "search-2")] == ["success"] * 3
    assert sorted(team.ran) == ["publish:reports/q", "search:q0", "search:q1"]
