"""A sync tool whose task is cancelled with its thread's attempt, as an event loop shutting down
cancels it, is recorded as the tool ended in its thread.

``asyncio.run(graph.ainvoke(...))`` returns once a tools node's call pauses for an approval while
the node's other calls are still left (LangGraph leaves them), and then cancels every task left:
the call's task, and the task awaiting its tool's worker thread, at once. The tool runs on in its
thread to its end and has its effect, but its outcome was recorded as ``error CancelledError``,
so the resumed run refused the call, which must run once, as "already ran and failed": the model
was told it failed when it had succeeded."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command
from test_langgraph import Team, _calls, _entries
from test_langgraph_r57_resume_threads import as_tools, one_at_a_time, tools_graph

from agentgate.integrations.langgraph import _calls as calls_module
from agentgate.integrations.langgraph import gated_tool_node

__all__ = ["one_at_a_time"]  # the fixture, imported for pytest

WAIT = 30.0  # a bound on waiting for an event that the test itself sets; never reached when it passes


def _graph(team: Team, search: Any) -> Any:
    def publish(path: str) -> str:
        team.ran.append(f"publish:{path}")
        return f"published {path}"

    return tools_graph(gated_tool_node(team.gate, as_tools(search, publish), agent="supervisor"))


def _first_run(team: Team, agent: Any, config: Any, running: threading.Event, go: threading.Event) -> Any:
    """The first run, under ``asyncio.run``: it pauses for the publish call's approval while the
    first search runs in its thread; ``go`` lets that thread end only once the loop's shutdown has
    cancelled every task left (a task of this run sets it as it is cancelled)."""
    answer = _calls(
        ("publish", {"path": "reports/q"}), ("search", {"query": "q0"}), ("search", {"query": "q1"})
    )

    async def release_when_cancelled() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            go.set()  # asyncio.run cancels every task left before any of them runs again

    async def run() -> dict[str, Any]:
        paused: dict[str, Any] = await agent.ainvoke({"messages": [answer]}, config, context=team.supervisor)
        assert await asyncio.to_thread(running.wait, WAIT)
        asyncio.get_running_loop().create_task(release_when_cancelled())
        return paused

    return asyncio.run(run())


def _search_outcomes(team: Team) -> list[tuple[str | None, str | None]]:
    outcomes = [e for e in _entries(team.gate) if e.resource == "tool:search" and e.kind == "outcome"]
    return [(e.status, e.reasons[0] if e.reasons else None) for e in outcomes]


def test_a_sync_tool_cancelled_with_its_loop_is_recorded_as_it_ended_in_its_thread(
    one_at_a_time: Team,
) -> None:
    """Review R57: a sync tool that ran to its end while its loop shut down was recorded as failed."""
    team = one_at_a_time
    running, go = threading.Event(), threading.Event()

    def search(query: str) -> str:
        running.set()
        assert go.wait(WAIT)
        team.ran.append(f"search:{query}")
        return f"results for {query}"

    agent = _graph(team, search)
    config: Any = {"configurable": {"thread_id": "shut"}}
    paused = _first_run(team, agent, config, running, go)
    [ran] = team.ran  # one search at a time: the one that had the slot
    assert sorted(_search_outcomes(team)) == [
        ("error", "CancelledError: given up before the call started"),  # the other: never began
        ("ok", None),  # ran to its end in its thread
    ]

    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    done = asyncio.run(agent.ainvoke(Command(resume=approval), config, context=team.supervisor))
    answers = {m.tool_call_id: m for m in done["messages"] if isinstance(m, ToolMessage)}
    assert [answers[i].status for i in ("publish-0", "search-1", "search-2")] == ["success"] * 3
    ids = {"search:q0": "search-1", "search:q1": "search-2"}
    assert answers[ids[ran]].content == f"results for {ran[7:]}"  # its answer, not a refusal
    assert sorted(team.ran) == ["publish:reports/q", "search:q0", "search:q1"]  # each once


def test_a_sync_tool_whose_thread_outlasts_the_wait_is_recorded_as_cancelled(
    one_at_a_time: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for the thread is bounded (``THREAD_END_WAIT_S``): past it, the call is recorded as
    cancelled while it ran (it may have had its effect), and the resumed run does not run it again."""
    team = one_at_a_time
    monkeypatch.setattr(calls_module, "THREAD_END_WAIT_S", 0.0)
    running, go, recorded = threading.Event(), threading.Event(), threading.Event()
    began: list[str] = []
    settle = team.gate._settle

    def settled(auth: Any, status: str, *args: Any, **kwargs: Any) -> None:
        settle(auth, status, *args, **kwargs)
        if began and auth.call.args.get("query") == began[0]:
            recorded.set()

    monkeypatch.setattr(team.gate, "_settle", settled)

    def search(query: str) -> str:
        began.append(query)
        running.set()
        assert go.wait(WAIT) and recorded.wait(WAIT)  # ends after its call's outcome is recorded
        team.ran.append(f"search:{query}")
        return f"results for {query}"

    agent = _graph(team, search)
    config: Any = {"configurable": {"thread_id": "outlasts"}}
    paused = _first_run(team, agent, config, running, go)
    assert team.ran == [f"search:{began[0]}"]
    assert sorted(_search_outcomes(team)) == [
        ("error", "CancelledError"),  # ran, its end not seen: it may have had its effect
        ("error", "CancelledError: given up before the call started"),
    ]

    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    done = asyncio.run(agent.ainvoke(Command(resume=approval), config, context=team.supervisor))
    answers = {m.tool_call_id: m for m in done["messages"] if isinstance(m, ToolMessage)}
    refused = answers["search-1" if began[0] == "q0" else "search-2"]
    assert refused.status == "error" and "may have had its effect" in str(refused.content)
    assert sorted(team.ran) == ["publish:reports/q", "search:q0", "search:q1"]
