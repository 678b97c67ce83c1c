"""The LangGraph integration: real agents under concurrency, cancellation and
streaming, with scripted chat models (no network). Each test is a defect found by running them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph import NAMES, Team, _calls, _entries, _make_team, _policy_text, _tool_messages, _tools

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

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


async def test_a_model_call_whose_run_was_cancelled_while_it_was_decided_is_not_charged(
    tmp_path: Path,
) -> None:
    # The run is cancelled while the model call is being decided (on a worker thread): the model
    # never runs. Its allow used to be settled as a model call cancelled while it ran, "the call
    # ran but its usage could not be read; charged as reserved": the log said it ran, and every
    # such cancellation took the call's whole output limit from the budget.
    team = _make_team(tmp_path)
    decide, deciding = team.gate.authorize, threading.Event()

    def slow_decision(identity: Any, call: Any, **kwargs: Any) -> Any:
        deciding.set()
        time.sleep(0.1)  # the task is cancelled while this decision is being made
        return decide(identity, call, **kwargs)

    team.gate.authorize = slow_decision  # type: ignore[method-assign]
    try:
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
            tools=_tools(team),
        )
        task = asyncio.create_task(agent.ainvoke(GO, context=team.supervisor))
        await asyncio.to_thread(deciding.wait, 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # the decision that outlived its task has been settled by now
        entries = _entries(team.gate)
        (outcome,) = [e for e in entries if e.kind == "outcome"]
        assert outcome.resource == "model:scripted" and outcome.status == "error"
        assert not any("ran" in reason for reason in outcome.reasons)
        assert team.gate.ledger.spent(team.supervisor.grant_id) == 0
        states = team.gate.store.query("SELECT state FROM budget_reservations")
        assert [state for (state,) in states] == ["released"]
    finally:
        team.gate.close()


async def test_a_once_only_tool_call_whose_run_was_cancelled_while_it_was_decided_runs_when_resumed(
    tmp_path: Path,
) -> None:
    # search is not idempotent here. The run is cancelled while its call is being decided: the
    # tool never runs. The allow used to be settled by running a cancelled attempt through the
    # scheduler, which marked the once-only key "ran and failed": resuming the thread refused
    # the call ("it may have had its effect") and `agentgate tasks unsettled` listed it.
    keys = {n: SigningKey.generate() for n in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace(
        "idempotent: true", "idempotent: false"
    )
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    team = Team(gate, keys, supervisor, tmp_path, [])
    decide, deciding = gate.authorize, threading.Event()

    def slow_decision(identity: Any, call: Any, **kwargs: Any) -> Any:
        if call.resource == "tool:search" and not deciding.is_set():
            deciding.set()
            time.sleep(0.1)  # the task is cancelled while this decision is being made
        return decide(identity, call, **kwargs)

    gate.authorize = slow_decision  # type: ignore[method-assign]
    try:
        agent = create_gated_agent(
            gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
            tools=_tools(team),
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "t"}}
        task = asyncio.create_task(agent.ainvoke(GO, config, context=supervisor))
        await asyncio.to_thread(deciding.wait, 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # the decision that outlived its task has been settled by now
        assert team.ran == []
        resumed = await agent.ainvoke(None, config, context=supervisor)
        assert [m.status for m in _tool_messages(resumed)] == ["success"]
        assert team.ran == ["search:x"]
        assert _outcomes(_entries(gate), "tool:search")[-1] == ("ok", ())
    finally:
        gate.close()


async def test_a_sync_tool_whose_run_was_cancelled_is_not_retried_after_its_attempt_fails(
    tmp_path: Path,
) -> None:
    # The cancelled run waits for the sync tool's running attempt (its thread cannot be
    # stopped); when that attempt fails, the scheduler's retry rule must not start another
    # attempt for a run that no longer exists.
    keys = {n: SigningKey.generate() for n in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace(
        "    idempotent: true",
        "    idempotent: true\n    retry: {attempts: 3, backoff_initial_s: 0.05, retry_on: [connection]}",
    )
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    attempts, started, release = [], threading.Event(), threading.Event()

    def search(query: str) -> str:
        attempts.append(query)
        started.set()
        release.wait(10)
        raise ConnectionError("the search backend is down")

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    try:
        agent = create_gated_agent(
            gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
            tools=[tool],
            gate_models=False,
        )
        task = asyncio.create_task(agent.ainvoke(GO, context=supervisor))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # a retry would have started by now (backoff 0.05 s)
        assert attempts == ["x"]
        assert [status for status, _ in _outcomes(_entries(gate), "tool:search")] == ["error"]
    finally:
        gate.close()
