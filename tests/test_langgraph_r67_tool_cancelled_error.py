"""A tool that raises ``CancelledError`` itself (an HTTP client that reports its own timeout so,
a future another task cancelled) is a failing tool, not a cancelled run: the model is told it
failed, as for any exception a tool raises. A real cancellation of the run still ends it, its
call settled with one outcome and no reservation held."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool
from test_langgraph import Team, _calls, _entries, _make_team, _tool_messages

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


def _agent(team: Team, tool: StructuredTool) -> Any:
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "a"}))], final="Gave up."),
        tools=[tool],
        gate_models=False,
    )


def _outcomes(team: Team) -> list[tuple[str | None, tuple[str, ...]]]:
    return [(e.status, e.reasons) for e in _entries(team.gate) if e.kind == "outcome"]


def _held(team: Team) -> list[str]:
    rows = team.gate.store.query("SELECT state FROM budget_reservations")
    return [state for (state,) in rows if state == "reserved"]


def _sync_search(query: str) -> str:
    raise asyncio.CancelledError(f"my own timeout for {query}")


async def _async_search(query: str) -> str:
    raise asyncio.CancelledError(f"my own timeout for {query}")


def _assert_told_as_a_failure(team: Team, result: dict[str, Any]) -> None:
    (told,) = _tool_messages(result)
    assert told.status == "error" and "CancelledError" in str(told.content)
    assert "my own timeout" not in str(told.content)  # its text is the tool's: the type only
    assert result["messages"][-1].content == "Gave up."  # the model had its next turn
    assert _outcomes(team) == [("error", ("CancelledError",))]
    assert _held(team) == []


async def test_an_async_tool_raising_its_own_cancelled_error_is_a_failed_call_under_ainvoke(
    tmp_path: Path,
) -> None:
    """Review R67: an async tool raising ``CancelledError`` ended the whole run in LangGraph's
    ``NodeCancelledError``, though nothing cancelled the run."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    tool = StructuredTool.from_function(coroutine=_async_search, name="search", description="search")
    try:
        result = await _agent(team, tool).ainvoke(GO, context=team.supervisor)
        _assert_told_as_a_failure(team, result)
    finally:
        team.gate.close()


async def test_a_sync_tool_raising_its_own_cancelled_error_in_its_thread_is_a_failed_call(
    tmp_path: Path,
) -> None:
    """Review R67: a sync tool raising ``CancelledError`` in its worker thread under ``ainvoke``
    ended the run in ``NodeCancelledError``."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    tool = StructuredTool.from_function(func=_sync_search, name="search", description="search")
    try:
        result = await _agent(team, tool).ainvoke(GO, context=team.supervisor)
        _assert_told_as_a_failure(team, result)
    finally:
        team.gate.close()


def test_a_sync_tool_raising_its_own_cancelled_error_under_invoke_is_a_failed_call(tmp_path: Path) -> None:
    """Review R67: under ``invoke`` nothing can cancel a tool call, yet a tool raising
    ``CancelledError`` ended the run in ``NodeCancelledError``."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    tool = StructuredTool.from_function(func=_sync_search, name="search", description="search")
    try:
        result = _agent(team, tool).invoke(GO, context=team.supervisor)
        _assert_told_as_a_failure(team, result)
    finally:
        team.gate.close()


async def test_a_real_cancellation_of_the_run_still_ends_it_with_one_outcome(tmp_path: Path) -> None:
    """Review R67: the run's own cancellation is not taken for the tool's: it goes on, and the
    call it cut is settled once (an ``error`` outcome), its reservation not left held."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    started = asyncio.Event()

    async def search(query: str) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    tool = StructuredTool.from_function(coroutine=search, name="search", description="search")
    try:
        task = asyncio.create_task(_agent(team, tool).ainvoke(GO, context=team.supervisor))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert [status for status, _ in _outcomes(team)] == ["error"]
        assert _held(team) == []
    finally:
        team.gate.close()
