"""Review R58: the answer kept for a sync tool that ended in its thread while its event loop shut
down is the one LangChain makes of the tool's end: a failure where LangChain's run of the tool
fails after the tool's work returned, and the error answer of a ``ToolException`` the tool
handles (``handle_tool_error``), as when the loop does not shut down.

Through a real graph with a ``gated_tool_node`` under ``asyncio.run``, with the first run of
tests/test_langgraph_r57_sync_tool_shutdown.py: its loop shuts down while the search call that has
the tool's one slot runs in its thread (the other search never begins)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel
from test_langgraph import Team, _entries
from test_langgraph_r57_resume_threads import as_tools, one_at_a_time, tools_graph
from test_langgraph_r57_sync_tool_shutdown import _first_run

from agentgate.integrations.langgraph import gated_tool_node

__all__ = ["one_at_a_time"]  # the fixture, imported for pytest

WAIT = 30.0  # a bound on waiting for an event that the test itself sets; never reached when it passes
NEVER_BEGAN = ("error", "CancelledError: given up before the call started")


class _Query(BaseModel):
    query: str


def _shut_down_while_searching(team: Team, make: Callable[[Callable[[str], Any]], BaseTool]) -> set[Any]:
    """The outcomes of the two search calls (status, first reason) of a first run whose loop
    shut down while one ran ``work`` in its thread; ``make`` makes the search tool of ``work``."""
    running, go = threading.Event(), threading.Event()

    def work(query: str) -> None:
        running.set()
        assert go.wait(WAIT)
        team.ran.append(f"search:{query}")

    def publish(path: str) -> str:
        return f"published {path}"

    agent = tools_graph(gated_tool_node(team.gate, [make(work), *as_tools(publish)], agent="supervisor"))
    _first_run(team, agent, {"configurable": {"thread_id": "r58"}}, running, go)
    assert len(team.ran) == 1  # the search that had the slot ran to its end
    outcomes = [e for e in _entries(team.gate) if e.resource == "tool:search" and e.kind == "outcome"]
    return {(e.status, e.reasons[0] if e.reasons else None) for e in outcomes}


def _structured(returns: Callable[[str], Any], **options: Any) -> Callable[[Callable[[str], Any]], BaseTool]:
    def make(work: Callable[[str], Any]) -> BaseTool:
        def search(query: str) -> Any:
            work(query)
            return returns(query)

        return StructuredTool.from_function(func=search, name="search", description="t", **options)

    return make


def _subclassed(returns: Callable[[str], Any], **options: Any) -> Callable[[Callable[[str], Any]], BaseTool]:
    def make(work: Callable[[str], Any]) -> BaseTool:
        class Search(BaseTool):
            name: str = "search"
            description: str = "t"
            args_schema: type[BaseModel] = _Query

            def _run(self, query: str) -> Any:
                work(query)
                return returns(query)

        return Search(**options)

    return make


def _fails(query: str) -> Any:
    raise ToolException(f"the index is down for {query}")


@pytest.mark.parametrize("make", [_structured, _subclassed], ids=["StructuredTool", "BaseTool"])
def test_a_content_and_artifact_tool_whose_value_is_not_a_pair_is_not_recorded_ok(
    one_at_a_time: Team, make: Any
) -> None:
    """Review R58: LangChain's run of a ``content_and_artifact`` tool whose work returns no pair
    fails (``ValueError``) after the work returned; ended in its thread as its loop shut down,
    the call was answered with the value and recorded ``ok`` (then, until this review's
    tests/test_langgraph_r58_tool_error_at_shutdown.py, ``CancelledError``)."""
    outcomes = _shut_down_while_searching(
        one_at_a_time, make(lambda query: f"results for {query}", response_format="content_and_artifact")
    )
    assert outcomes == {("error", "ValueError"), NEVER_BEGAN}  # failed, as LangChain's run of it


@pytest.mark.parametrize("make", [_structured, _subclassed], ids=["StructuredTool", "BaseTool"])
def test_a_handled_tool_exception_is_answered_as_langchain_answers_it(one_at_a_time: Team, make: Any) -> None:
    """Review R58: a tool that handles its ``ToolException`` (``handle_tool_error``) answers with
    an error message and is recorded as a failed call (``error``); raised in its thread as its
    loop shut down, it was recorded as cancelled while it ran (``CancelledError``)."""
    outcomes = _shut_down_while_searching(one_at_a_time, make(_fails, handle_tool_error=True))
    assert outcomes == {("error", None), NEVER_BEGAN}  # as the failed answer of a call that ran
