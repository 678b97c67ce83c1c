"""Review R94: the answers of calls that must run once, and the attempts of them running now, were
kept per ``GateMiddleware`` object. A run resumed through a new graph object built the same way
(same Gate, same checkpointer, same process: a web handler that builds the agent per request) did
not see them: a payment that ran beside a call paused for approval was answered to the model as
failed ("already ran to completion" or "was started ... never recorded"), though it ran once and
its outcome was recorded; two resumes of one thread through two agent objects at once did not
wait for each other, and one was told "was started". Rule (docs/langgraph.md): in the process
where it ran, a call refused because it already ran is answered with what it returned, and a
resumed run waits for its attempt, whichever graph object on the same Gate serves the run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from test_langgraph_time_travel import GO, Rig, _thread, _tool_messages, _turn
from test_langgraph_time_travel import rig as rig  # the fixture

from agentgate.gate import AgentIdentity
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, gated_tool_node
from agentgate.integrations.langgraph._calls import _AttemptEnd

WAIT_S = 5  # an upper bound for a wait that, with the rule holding, ends at once


def _waits_noted(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a run starts waiting for another attempt of a call (sync or async)."""
    waiting = threading.Event()
    wait, until_set = _AttemptEnd.wait, _AttemptEnd.until_set

    def noted_wait(self: _AttemptEnd) -> None:
        waiting.set()
        wait(self)

    async def noted_until_set(self: _AttemptEnd, *args: Any, **kwargs: Any) -> Any:
        waiting.set()
        return await until_set(self, *args, **kwargs)

    monkeypatch.setattr(_AttemptEnd, "wait", noted_wait)
    monkeypatch.setattr(_AttemptEnd, "until_set", noted_until_set)
    return waiting


def _with_pay(rig: Rig, before: Callable[[], None], after: Callable[[], None]) -> list[Any]:
    """``rig``'s tools, its ``pay`` calling ``before`` first and ``after`` once it paid."""
    tools = rig.tools()
    pay0 = next(t for t in tools if t.name == "pay")

    def pay(amount: int) -> str:
        before()
        paid = pay0.func(amount)  # type: ignore[attr-defined]
        after()
        return str(paid)

    return [
        StructuredTool.from_function(func=pay, name="pay", description="pay") if t.name == "pay" else t
        for t in tools
    ]


def _graph(rig: Rig, tools: list[Any], saver: InMemorySaver) -> Any:
    """A hand-built graph, one ``gated_tool_node``: a new object per call, one checkpointer."""
    builder = StateGraph(MessagesState, context_schema=AgentIdentity)
    builder.add_node("tools", gated_tool_node(rig.gate, tools, agent="agent"))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


PAY_AND_PUBLISH = _turn(("pay", {"amount": 9}, "pay-1"), ("publish", {"path": "reports/n"}, "pub-1"))


def _paid_once(rig: Rig, done: dict[str, Any]) -> None:
    assert sorted(rig.ran) == ["pay:9", "publish:reports/n"]
    by_id = {m.tool_call_id: m for m in _tool_messages(done)}
    assert (by_id["pay-1"].status, by_id["pay-1"].content) == ("success", "paid 9"), by_id["pay-1"].content
    assert (by_id["pub-1"].status, by_id["pub-1"].content) == ("success", "published reports/n")


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_a_call_that_ran_keeps_its_answer_when_a_new_graph_resumes(rig: Rig, mode: str) -> None:
    paid = threading.Event()
    tools = _with_pay(rig, lambda: None, paid.set)
    saver, config = InMemorySaver(), _thread(f"new-graph-{mode}")

    async def run(value: Any) -> dict[str, Any]:
        graph = _graph(rig, tools, saver)  # a new graph object for each request
        if mode == "ainvoke":
            return await graph.ainvoke(value, config, context=rig.agent)
        return graph.invoke(value, config, context=rig.agent)

    paused = await run({"messages": [PAY_AND_PUBLISH]})
    await asyncio.to_thread(paid.wait, WAIT_S)  # the payment ran in the first run
    done = await run(Command(resume=rig.approve(paused["__interrupt__"][0].value)))
    _paid_once(rig, done)


async def test_a_new_graph_resuming_waits_for_a_call_still_running(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = _waits_noted(monkeypatch)
    # The payment is still running when the resumed run reaches it: it ends once that run waits.
    tools = _with_pay(rig, lambda: waiting.wait(WAIT_S), lambda: None)
    saver, config = InMemorySaver(), _thread("new-graph-running")
    paused = await _graph(rig, tools, saver).ainvoke(
        {"messages": [PAY_AND_PUBLISH]}, config, context=rig.agent
    )
    resume = Command(resume=rig.approve(paused["__interrupt__"][0].value))
    done = await _graph(rig, tools, saver).ainvoke(resume, config, context=rig.agent)
    assert waiting.is_set()
    _paid_once(rig, done)


def test_two_resumes_through_two_agents_at_once_wait_for_each_other(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = _waits_noted(monkeypatch)
    ran: list[str] = []

    def publish(path: str) -> str:
        ran.append(path)
        waiting.wait(WAIT_S)  # runs until the other resume waits for it
        return "ok"

    tool = StructuredTool.from_function(func=publish, name="publish", description="publish")
    saver, config = InMemorySaver(), _thread("two-resumes")

    def agent() -> Any:  # one agent object per request
        model = ScriptedChatModel(
            turns=[_turn(("publish", {"path": "reports/a"}, "c1")), AIMessage(content="done")]
        )
        return create_gated_agent(
            rig.gate, name="agent", model=model, tools=[tool], checkpointer=saver, gate_models=False
        )

    paused = agent().invoke(GO, config, context=rig.agent)
    resume = Command(resume=rig.approve(paused["__interrupt__"][0].value))
    answers: dict[int, list[tuple[str, Any]]] = {}

    def resume_with(i: int) -> None:
        done = agent().invoke(resume, config, context=rig.agent)
        answers[i] = [(m.status, m.content) for m in _tool_messages(done)]

    threads = [threading.Thread(target=resume_with, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * WAIT_S)
    assert ran == ["reports/a"]
    assert answers == {0: [("success", "ok")], 1: [("success", "ok")]}


def test_an_interrupt_between_the_claim_and_the_run_releases_the_attempt(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C after a call's attempt was claimed and before the block that runs it: until the
    # regression review of R94 the claim stayed, and every later run of that call on any graph
    # object on the Gate waited for it for good.
    from agentgate.integrations.langgraph import _middleware

    running = _middleware.GateMiddleware._running

    def interrupted(self: Any, key: Any) -> Any:
        monkeypatch.setattr(_middleware.GateMiddleware, "_running", running)
        raise KeyboardInterrupt

    monkeypatch.setattr(_middleware.GateMiddleware, "_running", interrupted)
    saver, config = InMemorySaver(), _thread("interrupted-claim")
    with pytest.raises(KeyboardInterrupt):
        _graph(rig, rig.tools(), saver).invoke({"messages": [PAY_AND_PUBLISH]}, config, context=rig.agent)
    assert not _middleware._calls_of(rig.gate)._in_flight
