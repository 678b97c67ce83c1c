"""Review R25 of the LangGraph integration: real agents under concurrency, cancellation and
streaming, with scripted chat models (no network). Each test is a defect found by running them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool
from test_langgraph import _calls, _entries, _make_team, _tool_messages

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


def _outcomes(entries: list[Any], resource: str) -> list[tuple[str | None, tuple[str, ...]]]:
    return [(e.status, e.reasons) for e in entries if e.kind == "outcome" and e.resource == resource]


async def test_a_sync_tool_that_ran_to_its_end_under_a_cancelled_run_is_recorded_and_charged(
    tmp_path: Path,
) -> None:
    # Under ainvoke a sync tool runs in a worker thread that no cancellation stops: the run's
    # task waits for it, and the tool has its effect. The call used to be recorded as an error
    # (CancelledError) and its reservation released: the log said it failed, and every run a
    # client cancelled (a request timeout) got its tool calls for free, past a `calls` budget.
    team = _make_team(tmp_path, budget=2, unit="calls")
    started, release, ran = threading.Event(), threading.Event(), []

    def search(query: str) -> str:
        started.set()
        release.wait(10)
        ran.append(query)
        return f"results for {query}"

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    try:
        first = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "a"}))]),
            tools=[tool],
            gate_models=False,
        )
        task = asyncio.create_task(first.ainvoke(GO, context=team.supervisor))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled() and ran == ["a"]
        assert _outcomes(_entries(team.gate), "tool:search") == [("ok", ())]
        assert team.gate.ledger.spent(team.supervisor.grant_id) == 1

        second = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "b"}), ("search", {"query": "c"}))]),
            tools=[tool],
            gate_models=False,
        )
        result = await second.ainvoke(GO, context=team.supervisor)
        assert sorted(m.status for m in _tool_messages(result)) == ["error", "success"]
        assert len(ran) == 2  # two calls ran on a budget of two
    finally:
        team.gate.close()
