"""Review R58: a sync tool that raised in its thread while its event loop shut down is recorded
with its own error, as a tool that raised is recorded when the loop does not shut down (the
error's type name, started, charged alike), not as cancelled while it ran (``CancelledError``).

Through a real graph with a ``gated_tool_node`` under ``asyncio.run``, with the first run of
tests/test_langgraph_r57_sync_tool_shutdown.py: its loop shuts down while the search call that has
the tool's one slot runs in its thread (the other search never begins)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.types import Command
from pydantic import BaseModel
from test_langgraph import Team, _calls, _entries
from test_langgraph_r57_resume_threads import as_tools, one_at_a_time, tools_graph
from test_langgraph_r57_sync_tool_shutdown import _first_run

from agentgate.integrations.langgraph import gated_tool_node

__all__ = ["one_at_a_time"]  # the fixture, imported for pytest

WAIT = 30.0  # a bound on waiting for an event that the test itself sets; never reached when it passes
NEVER_BEGAN = ("error", "CancelledError: given up before the call started", 0)


class _Query(BaseModel):
    query: str


def _structured(search: Callable[[str], str]) -> BaseTool:
    return StructuredTool.from_function(func=search, name="search", description="t")


def _subclassed(search: Callable[[str], str]) -> BaseTool:
    class Search(BaseTool):
        name: str = "search"
        description: str = "t"
        args_schema: type[BaseModel] = _Query

        def _run(self, query: str) -> str:
            return search(query)

    return Search()


@pytest.mark.parametrize("make", [_structured, _subclassed], ids=["StructuredTool", "BaseTool"])
@pytest.mark.parametrize("error", [RuntimeError, ToolException], ids=["RuntimeError", "ToolException"])
def test_a_tool_that_raised_as_its_loop_shut_down_is_recorded_with_its_own_error(
    one_at_a_time: Team,
    make: Callable[[Callable[[str], str]], BaseTool],
    error: type[Exception],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review R58: a sync tool that raised while its loop shut down was recorded as CancelledError."""
    team = one_at_a_time
    running, go = threading.Event(), threading.Event()

    def search(query: str) -> str:
        running.set()
        assert go.wait(WAIT)
        team.ran.append(f"search:{query}")
        raise error(f"the index is down for {query}")

    def publish(path: str) -> str:
        return f"published {path}"

    agent = tools_graph(gated_tool_node(team.gate, [make(search), *as_tools(publish)], agent="supervisor"))
    before = len(_entries(team.gate))
    paused = _first_run(team, agent, {"configurable": {"thread_id": "shut"}}, running, go)
    assert len(team.ran) == 1  # the search that had the slot raised in its thread
    shut_down = _search_outcomes(team, since=before)

    # The same failure when the loop does not shut down: one search, answered as failed.
    before = len(_entries(team.gate))
    done = asyncio.run(
        agent.ainvoke(
            {"messages": [_calls(("search", {"query": "q2"}))]},
            {"configurable": {"thread_id": "ordinary"}},
            context=team.supervisor,
        )
    )
    assert [m.status for m in done["messages"] if isinstance(m, ToolMessage)] == ["error"]
    [ordinary] = _search_outcomes(team, since=before)
    assert ordinary == ("error", error.__name__, ordinary[2])
    assert shut_down == {ordinary, NEVER_BEGAN}

    # Started: the resumed run does not run it again, and says it failed.
    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    config: Any = {"configurable": {"thread_id": "shut"}}
    resumed = asyncio.run(agent.ainvoke(Command(resume=approval), config, context=team.supervisor))
    answers = {m.tool_call_id: m for m in resumed["messages"] if isinstance(m, ToolMessage)}
    failed, other = ("search-1", "search-2") if team.ran[0] == "search:q0" else ("search-2", "search-1")
    assert "already ran and failed" in str(answers[failed].content)
    assert f"failed ({error.__name__})" in str(answers[other].content)  # it never began: run now
    assert sorted(team.ran) == ["search:q0", "search:q1", "search:q2"]  # each once
    # No attempt task left failing at the shutdown (asyncio logs it).
    assert not [r for r in caplog.records if "unhandled exception" in r.getMessage()]


def _search_outcomes(team: Team, *, since: int) -> set[tuple[str | None, str | None, int]]:
    """(status, first reason, budget change) of the search calls' outcomes from entry ``since`` on."""
    entries = _entries(team.gate)[since:]
    return {
        (e.status, e.reasons[0] if e.reasons else None, e.budget_delta)
        for e in entries
        if e.resource == "tool:search" and e.kind == "outcome"
    }
