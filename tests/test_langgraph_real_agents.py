"""The LangGraph integration: each test is a defect found by running real agents."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from langchain.agents.middleware import ModelFallbackMiddleware, ToolRetryMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import Field
from test_langgraph import (
    Team,
    _ask_researcher,
    _calls,
    _entries,
    _make_team,
    _team_gate,
    _tool_messages,
    _tools,
)
from test_langgraph import team as team  # the fixture

from agentgate.gate import Approval
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


def _held(team: Team) -> list[Any]:
    """Reservations still held (neither committed nor released)."""
    team.gate.flush()
    return list(team.gate.store.query("SELECT id FROM budget_reservations WHERE state = 'reserved'"))


def test_a_tool_call_id_reused_by_a_later_run_runs_the_tool_again(team: Team) -> None:
    # A model that numbers its tool calls from 0 in every answer (ScriptedChatModel, several local
    # servers) gives the same id to a new call. It used to get the first call's cached result: the
    # tool did not run, yet the audit log said it ran ("ok") and the budget was charged.
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    for _ in range(3):
        agent.invoke(GO, context=team.supervisor)
    assert team.ran == ["search:x"] * 3


def test_a_tool_call_id_reused_in_a_later_turn_of_the_same_thread_runs_again(team: Team) -> None:
    turns = [_calls(("search", {"query": "status"})), _calls(("search", {"query": "status"}))]
    assert turns[0].tool_calls[0]["id"] == turns[1].tool_calls[0]["id"]
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=turns),
        tools=_tools(team),
        checkpointer=InMemorySaver(),
    )
    agent.invoke(GO, {"configurable": {"thread_id": "t"}}, context=team.supervisor)
    assert team.ran == ["search:status"] * 2
    outcomes = [e.status for e in _entries(team.gate) if e.kind == "outcome" and e.resource == "tool:search"]
    assert outcomes == ["ok", "ok"]


async def test_cancelling_a_run_while_its_call_is_being_decided_settles_the_decision(tmp_path: Path) -> None:
    # The decision runs on a worker thread; a task cancelled meanwhile used to leave the recorded
    # allow without an outcome and its budget reservation (the model call's cost) held for good.
    made = _make_team(tmp_path)
    try:
        agent = create_gated_agent(
            made.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
            tools=_tools(made),
        )
        decide, deciding = made.gate.authorize, threading.Event()

        def slow_decision(identity: Any, call: Any, **kwargs: Any) -> Any:
            deciding.set()
            time.sleep(0.1)  # the task is cancelled while this decision is being made
            return decide(identity, call, **kwargs)

        made.gate.authorize = slow_decision  # type: ignore[method-assign]
        task = asyncio.create_task(agent.ainvoke(GO, context=made.supervisor))
        await asyncio.to_thread(deciding.wait, 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # a decision that outlived its task has been recorded by now
        entries = _entries(made.gate)
        allowed = {
            e.index for e in entries if e.kind == "allow" and not (e.resource or "").startswith("agent:")
        }
        assert [e.resource for e in entries if e.kind == "allow"] == ["agent:supervisor", "model:scripted"]
        assert allowed == {e.ref for e in entries if e.kind == "outcome"}
        assert _held(made) == []
    finally:
        made.gate.close()


def test_a_sub_agent_that_raises_is_a_tool_error_not_the_end_of_the_supervisor(team: Team) -> None:
    class Broken(ScriptedChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("backend password is hunter2")

    researcher = create_gated_agent(
        team.gate, name="researcher", model=Broken(turns=[]), tools=_tools(team), gate_models=False
    )
    ask = _ask_researcher(team, agent=researcher)
    model = ScriptedChatModel(
        turns=[_calls(("ask_researcher", {"task": "dig"})), _calls(("search", {"query": "myself"}))]
    )
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask, *_tools(team)])
    result = supervisor.invoke(GO, context=team.supervisor)
    failed, searched = _tool_messages(result)
    assert searched.status == "success"
    assert failed.status == "error" and "RuntimeError" in str(failed.content)
    assert "hunter2" not in repr(result)
    assert team.ran == ["search:myself"]
    assert isinstance(result["messages"][-1], AIMessage)


def test_every_delegating_call_hands_a_fresh_grant_even_with_a_reused_tool_call_id(team: Team) -> None:
    # The delegation tool keeps one grant per delegating tool call (so that a sub-agent resumed
    # after an approval keeps its grant). It keyed them by tool call id only: a later run (or turn)
    # whose model reused the id got the earlier call's grant, with what was left of its budget.
    researcher = create_gated_agent(
        team.gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "papers"}))]),
        tools=_tools(team),
    )
    ask = _ask_researcher(team, agent=researcher, budget=50_000)
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask])
    for _ in range(2):
        supervisor.invoke(GO, context=team.supervisor)
    grants = [child.grant_id for _, child in team.gate.delegations]
    assert len(grants) == 2 and grants[0] != grants[1]
    assert team.ran == ["search:papers"] * 2


class _Recording(ScriptedChatModel):
    """A scripted model configured, like ChatOpenAI or ChatAnthropic, with its own ``max_tokens``;
    records the output limit each call really ran with."""

    max_tokens: int | None = None
    seen: list[int | None] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(**kwargs)  # as real chat models do: the settings reach each call

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.seen.append(kwargs.get("max_tokens", self.max_tokens))
        return super()._generate(messages, stop, run_manager, **kwargs)


def _bounded_researcher(team: Team, model: _Recording) -> Any:
    researcher = create_gated_agent(team.gate, name="researcher", model=model, tools=_tools(team))
    return _ask_researcher(
        team, agent=researcher, capabilities=["tool:search", "model:scripted?max_tokens<=2048"]
    )


def test_a_model_call_never_runs_with_more_output_tokens_than_were_decided(team: Team) -> None:
    # The middleware decided model calls as max_tokens=1024 (its default) whatever the model was
    # configured with, and did not pass that limit on: a model set to 8192 output tokens ran under
    # a grant that allows at most 2048 (the constraint was checked against a number never used).
    wide = _Recording(turns=[_calls(("search", {"query": "x"}))], max_tokens=8192)
    unset = _Recording(turns=[_calls(("search", {"query": "y"}))])
    for model in (wide, unset):
        ask = _bounded_researcher(team, model)
        supervisor = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "go"}))]),
            tools=[ask],
        )
        supervisor.invoke(GO, context=team.supervisor)
    assert wide.seen == []  # refused: 8192 output tokens exceed the grant's 2048
    assert unset.seen and all(seen == 1024 for seen in unset.seen)  # the decided limit, passed on
    refused = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "model:scripted"]
    assert refused and "max_tokens" in " ".join(refused[0].reasons)


def test_a_retry_middleware_given_to_create_gated_agent_cannot_rerun_a_tool_undecided(team: Team) -> None:
    # create_gated_agent put the gate outermost, so the middleware given to it ran inside the
    # decision: ToolRetryMiddleware ran a failing tool three times under one allow (one outcome
    # in the audit log, and the scheduler's rule never to repeat a non-idempotent call bypassed).
    runs: list[str] = []

    def search(query: str) -> str:
        runs.append(query)
        raise ConnectionError("lost")

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))]),
        tools=[tool],
        middleware=[ToolRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)],
    )
    agent.invoke(GO, context=team.supervisor)
    allowed = [e for e in _entries(team.gate) if e.kind == "allow" and e.resource == "tool:search"]
    assert runs and len(runs) == len(allowed)


class _Down(ScriptedChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("primary model down")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("primary model down")


class _Premium(ScriptedChatModel):
    ran: list[int] = Field(default_factory=list)

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.ran.append(1)
        return super()._generate(*args, **kwargs)

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        self.ran.append(1)
        return await super()._agenerate(*args, **kwargs)


def test_a_fallback_model_is_decided_under_its_own_name(team: Team) -> None:
    # ModelFallbackMiddleware inside the gate called a model the policy does not list
    # (model:premium) under the decision made for model:scripted.
    for model_name in (None, "scripted"):
        premium = _Premium(turns=[], model_name="premium")
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=_Down(turns=[]),
            tools=_tools(team),
            model_name=model_name,
            middleware=[ModelFallbackMiddleware(premium)],
        )
        with contextlib.suppress(ConnectionError):
            agent.invoke(GO, context=team.supervisor)
        assert premium.ran == []
    refused = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "model:premium"]
    assert len(refused) == 2


def test_a_tool_is_not_a_delegation_because_its_metadata_says_so(team: Team) -> None:
    # Delegation tools skip the tool decision (Gate.delegate decides them). Any tool whose
    # metadata carried the marker key (metadata is set by whoever wrote or converted the tool,
    # e.g. from a remote tool server's annotations) ran with no decision and no audit entry.
    def shell(cmd: str) -> str:
        team.ran.append(f"shell:{cmd}")
        return "ran"

    disguised = StructuredTool.from_function(
        func=shell, name="shell", description="shell", metadata={"agentgate_delegation": "shell"}
    )
    model = ScriptedChatModel(turns=[_calls(("shell", {"cmd": "id"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[disguised])
    (message,) = _tool_messages(agent.invoke(GO, context=team.supervisor))
    assert team.ran == [] and message.status == "error"
    assert ("deny", "tool:shell") in [(e.kind, e.resource) for e in _entries(team.gate)]


async def test_the_same_holds_under_ainvoke(team: Team) -> None:
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
        tools=_tools(team),
    )
    for _ in range(2):
        await agent.ainvoke(GO, context=team.supervisor)
    assert team.ran == ["search:x"] * 2  # a reused tool call id runs again

    premium = _Premium(turns=[], model_name="premium")
    fallback = create_gated_agent(
        team.gate,
        name="supervisor",
        model=_Down(turns=[]),
        tools=_tools(team),
        model_name="scripted",
        middleware=[ModelFallbackMiddleware(premium)],
    )
    await fallback.ainvoke(GO, context=team.supervisor)
    assert premium.ran == []
    assert ("deny", "model:premium") in [(e.kind, e.resource) for e in _entries(team.gate)]


async def test_a_cancelled_decision_is_settled_without_waiting_for_a_slot(team: Team) -> None:
    # Settling the allow of a cancelled decision must not queue for the tool's concurrency slot:
    # with both slots of search held, the cancellation would wait until one frees.
    release = asyncio.Event()

    async def search(query: str) -> str:
        if query.startswith("hold"):
            await release.wait()
        return "x"

    tool = StructuredTool.from_function(coroutine=search, name="search", description="search")
    holder = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(
            turns=[_calls(("search", {"query": "hold1"}), ("search", {"query": "hold2"}))]
        ),
        tools=[tool],
    )
    cancelled = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "late"}))]),
        tools=[tool],
    )
    decide = team.gate.authorize

    def slow_decision(identity: Any, call: Any, **kwargs: Any) -> Any:
        if call.args.get("query") == "late":
            decided.set()
            time.sleep(0.2)  # the task is cancelled while this decision is being made
        return decide(identity, call, **kwargs)

    decided = threading.Event()
    team.gate.authorize = slow_decision  # type: ignore[method-assign]
    holding = asyncio.create_task(holder.ainvoke(GO, context=team.supervisor))
    late = asyncio.create_task(cancelled.ainvoke(GO, context=team.supervisor))
    await asyncio.to_thread(decided.wait, 10)
    late.cancel()
    done, _ = await asyncio.wait({late}, timeout=5)
    assert done == {late} and not holding.done()  # settled while both slots are still held
    release.set()
    await holding
    entries = _entries(team.gate)
    allowed = {e.index for e in entries if e.kind == "allow" and not (e.resource or "").startswith("agent:")}
    assert allowed == {e.ref for e in entries if e.kind == "outcome"}
    assert _held(team) == []


async def test_gate_close_from_an_event_loop_after_sync_runs_closes_and_records(tmp_path: Path) -> None:
    # An async application that ran an agent with invoke() (the sync scheduler exists) and closes
    # the gate in its shutdown handler, on the event loop's thread: Gate.close raised RuntimeError
    # and stopped before committing the pending outcomes and closing the store.
    made = _make_team(tmp_path)
    agent = create_gated_agent(
        made.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))]),
        tools=_tools(made),
    )
    agent.invoke(GO, context=made.supervisor)
    made.gate.close()
    reopened = made.reopen()
    entries = list(reopened.audit.entries())
    calls = [e for e in entries if e.kind == "allow" and not (e.resource or "").startswith("agent:")]
    assert calls and len([e for e in entries if e.kind == "outcome"]) == len(calls)
    reopened.close()


def test_an_approval_answered_with_a_refusal_is_recorded_as_a_refusal(team: Team) -> None:
    # Resuming an approval interrupt with something that is not an approval ("deny") refuses the
    # call; the audit log kept only the approval_required entry and the request stayed pending.
    from langgraph.types import Command
    from test_langgraph import _publisher

    agent = _publisher(team.gate, InMemorySaver(), team)
    config = {"configurable": {"thread_id": "declined"}}
    agent.invoke(GO, config, context=team.supervisor)
    agent.invoke(Command(resume="deny"), config, context=team.supervisor)
    assert team.ran == []
    entries = [e for e in _entries(team.gate) if e.resource == "tool:publish"]
    assert [e.kind for e in entries] == ["approval_required", "deny"]
    assert entries[1].ref == entries[0].index
    assert team.gate.store.query("SELECT id FROM approvals WHERE state = 'pending'") == []


def test_an_approved_tool_that_asks_the_human_itself_can_complete(tmp_path: Path) -> None:
    # A tool behind an approval gate that calls interrupt() itself (a confirmation): on the resume
    # LangGraph re-runs the node, the middleware's interrupt() replays the first resume value (the
    # approval, already consumed by the first run), the decision refuses it ("already used"), and
    # the tool never completes.
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    made = _make_team(tmp_path)
    try:

        def publish(path: str) -> str:
            answer = interrupt({"confirm": path})
            made.ran.append(f"publish:{path}:{answer}")
            return "published"

        tool = StructuredTool.from_function(func=publish, name="publish", description="publish")
        agent = create_gated_agent(
            made.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/x"}))]),
            tools=[tool],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )
        config = {"configurable": {"thread_id": "confirm"}}
        paused = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=made.supervisor
        )
        approval = made.gate.approve(paused["__interrupt__"][0].value, made.keys["dana"])
        asked = agent.invoke(Command(resume=approval), config, context=made.supervisor)
        assert asked["__interrupt__"][0].value == {"confirm": "reports/x"}
        agent.invoke(Command(resume="yes"), config, context=made.supervisor)
        assert made.ran == ["publish:reports/x:yes"]
        trail = [(e.kind, e.status) for e in _entries(made.gate) if e.resource == "tool:publish"]
        # One request (asked once, re-armed by the pause), two runs of the one approved call,
        # each let through by the one (replayed) yes, on the record each time.
        assert trail == [
            ("approval_required", None),
            ("approval_given", None),
            ("allow", None),
            ("outcome", "paused"),
            ("approval_given", None),
            ("allow", None),
            ("outcome", "ok"),
        ]
        states = made.gate.store.query("SELECT state FROM approvals")
        assert [tuple(r) for r in states] == [("consumed",)]
        assert made.gate.verify().ok
    finally:
        made.gate.close()


def _with_shell(text: str) -> str:
    """test_langgraph's team policy with ``tool:shell`` (not idempotent) granted to the supervisor."""
    return text.replace(
        "      - resource: tool:ask_stowaway\n      - resource: model:scripted\n    budget",
        "      - resource: tool:ask_stowaway\n      - resource: tool:shell\n      - resource: model:scripted\n    budget",
    )


def test_an_async_only_tool_in_a_sync_run_is_refused_unrun_and_runs_when_replayed_async(
    tmp_path: Path,
) -> None:
    """Review R54: an async-only tool under invoke was recorded as ran-and-failed, charged, and refused when replayed async."""
    gate, _keys, supervisor = _team_gate(tmp_path / "agentgate.db", _with_shell)
    ran: list[str] = []

    async def shell(cmd: str) -> str:
        ran.append(cmd)
        return "ran"

    tool = StructuredTool.from_function(coroutine=shell, name="shell", description="shell tool")
    agent = create_gated_agent(
        gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("shell", {"cmd": "ls"}))]),
        tools=[tool],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    try:
        (refused,) = _tool_messages(agent.invoke(GO, config, context=supervisor))
        assert refused.status == "error" and "only an async implementation" in str(refused.content)
        assert [e.kind for e in _entries(gate) if e.resource == "tool:shell"] == ["deny"]
        assert list(gate.store.query("SELECT key FROM agentgate_once")) == []
        assert ran == []

        # The same call replayed under ainvoke (the checkpoint before the tools ran) runs.
        (before_tools,) = [s for s in agent.get_state_history(config) if s.next == ("tools",)]
        replayed = asyncio.run(agent.ainvoke(None, before_tools.config, context=supervisor))
        assert [m.status for m in _tool_messages(replayed)] == ["success"]
        assert ran == ["ls"]
    finally:
        gate.close()


def test_an_approval_that_does_not_count_is_asked_for_again_saying_why(team: Team) -> None:
    """Review R54: a refused approval was asked for again with the policy's reasons only, not why it did not count."""

    def publisher(path: str) -> Any:
        model = ScriptedChatModel(turns=[_calls(("publish", {"path": path}))])
        return create_gated_agent(
            team.gate,
            name="supervisor",
            model=model,
            tools=_tools(team),
            checkpointer=InMemorySaver(),
            gate_models=False,
        )

    agent, other = publisher("reports/a"), publisher("reports/b")
    config, elsewhere = {"configurable": {"thread_id": "a"}}, {"configurable": {"thread_id": "b"}}
    (pending,) = agent.invoke(GO, config, context=team.supervisor)["__interrupt__"]
    (another,) = other.invoke(GO, elsewhere, context=team.supervisor)["__interrupt__"]
    asked = pending.value["request"]["reasons"]
    for approval, why in [
        # Signed with Approval.sign: Gate.approve refuses the first two since review R71.
        (
            Approval.sign(pending.value, team.keys["supervisor"]).to_dict(),
            "the approver must not be the requester",
        ),
        (
            Approval.sign(pending.value, team.keys["researcher"]).to_dict(),
            "its approver is not one of this call's approvers",
        ),
        (team.gate.approve(another.value, team.keys["dana"]), "it was given for another call"),
    ]:
        (pending,) = agent.invoke(Command(resume=approval), config, context=team.supervisor)["__interrupt__"]
        assert pending.value["request"]["reasons"] == [*asked, f"approval not counted: {why}"]
    agent.invoke(
        Command(resume=team.gate.approve(pending.value, team.keys["dana"])), config, context=team.supervisor
    )
    assert team.ran == ["publish:reports/a"]
