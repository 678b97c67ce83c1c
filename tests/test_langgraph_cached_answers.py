"""The LangGraph middleware's run-once scope with cached and repeated answers: the scope by the asking answer's id (``_run_id`` / ``_asking_answer``), kept answers (``_keep`` /
``_answer_again``), waiting for a call still running (``_running`` / ``_ran_here``), the
cut-answer guard (``_cut_at_limit``) and the streamed ``DispatchedChatModel`` (``_Pieces``).
Real langgraph 1.2 / langchain 1.5, real SQLite stores, LangChain's own ``InMemoryCache`` and
``InMemorySaver``, a real HTTP backend on loopback (``EvilBackend``) behind a real dispatcher.

What holds:

- Two runs on two threads of one checkpointer, whose model answers are the same (LangChain's
  LLM cache hands back the cached answer: the same message id and tool call ids), each run
  their non-idempotent call: the thread is part of the run-once scope.
- A streamed answer through the dispatcher that says once that it was cut (``finish_reason``
  ``length``) runs none of its tool calls, the complete ones included, and the refusals are
  recorded; the same answer finished (``tool_calls``) runs its calls.

What did not hold (were strict xfails; fixed by the lead in agentgate/integrations/langgraph/, which
the lead owns):

- Without a checkpointer (no ``thread_id``: a stateless service invoking the agent once per
  request), the run-once scope is ``|answer:ID`` alone. Two independent runs whose answers have
  the same id (LangChain's LLM cache returns a cached answer with its id and tool call ids) share
  it: the second run's non-idempotent call is refused as "already ran", recorded as a deny, and
  the model is handed the *first* run's answer (``_answer_again``): "paid 5" for a payment that
  was never made. The docstring of ``_run_id`` says a call "in another run ... is another call,
  and runs"; before this session (task scope) it ran.
- A backend that sends ``finish_reason: length`` on two events (its last delta and again on its
  usage event): ``_Pieces.of`` puts it on both chunks, LangChain adds them up to
  ``"lengthlength"``, which ``_cut_at_limit`` does not know, and the complete tool calls of the
  cut answer run.
- A tool that runs its own agent again on the same thread (``agent.invoke(None, config)``: the
  pending tools node of the same answer) waits for itself for ever in ``_ran_here``
  (``busy.wait()`` with no owner check and no end); before this session the inner call was
  refused as started.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_dispatch_usage import EvilBackend
from test_langgraph_time_travel import GO, Rig, _turn
from test_langgraph_time_travel import rig as rig  # the fixture

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent


def _cached_agent(rig: Rig, checkpointer: Any = None) -> Any:
    """An agent whose model answers through LangChain's LLM cache: the same prompt gets the
    cached answer, message id and tool call ids included."""
    model = ScriptedChatModel(turns=[_turn(("pay", {"amount": 5}, "call_0"))], cache=InMemoryCache())
    return create_gated_agent(
        rig.gate, name="agent", model=model, tools=rig.tools(), checkpointer=checkpointer, gate_models=False
    )


def _answers(state: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def _pay_denials(rig: Rig) -> list[str]:
    return [e.reasons[0] for e in rig.entries() if e.kind == "deny" and e.resource == "tool:pay"]


def test_two_threads_with_the_same_cached_answer_each_run_the_call(rig: Rig) -> None:
    agent = _cached_agent(rig, InMemorySaver())
    first = agent.invoke(GO, {"configurable": {"thread_id": "t1"}}, context=rig.agent)
    second = agent.invoke(GO, {"configurable": {"thread_id": "t2"}}, context=rig.agent)
    ids = [next(m.id for m in s["messages"] if m.type == "ai") for s in (first, second)]
    assert ids[0] == ids[1]  # the cache did hand back the same answer
    assert rig.ran == ["pay:5", "pay:5"]
    assert _pay_denials(rig) == []


def test_a_cached_answer_in_another_stateless_run_is_decided_again(rig: Rig) -> None:
    agent = _cached_agent(rig)  # no checkpointer: one run per request, no thread
    first = agent.invoke(GO, context=rig.agent)
    second = agent.invoke(GO, context=rig.agent)
    ids = [next(m.id for m in s["messages"] if m.type == "ai") for s in (first, second)]
    assert ids[0] == ids[1]
    assert _answers(first) == ["paid 5"]
    # The second request is another payment: decided and run (or refused with its own reason),
    # never refused as "already ran" and answered with the first run's "paid 5".
    assert _pay_denials(rig) == []
    assert rig.ran == ["pay:5", "pay:5"]


# --- the cut-answer guard on a streamed answer through the dispatcher --------------------------


def _event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    return json.dumps(
        {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    )


USAGE = {"usage": {"prompt_tokens": 9, "completion_tokens": 16}}


def _stream_of(finish: str, *, again: bool) -> list[str]:
    """A streamed answer with one complete call (pay 5) and one cut (pay 50... of 5000),
    ``finish`` sent on the last delta and, with ``again``, on the usage event too."""
    return [
        _event(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "pay", "arguments": '{"amount": 5}'}}
                ]
            }
        ),
        _event(
            {
                "tool_calls": [
                    {"index": 1, "id": "b", "function": {"name": "pay", "arguments": '{"amount": 50'}}
                ]
            },
            finish,
        ),
        _event({}, finish, **USAGE) if again else json.dumps({"id": "c1", "choices": [], **USAGE}),
        "[DONE]",
    ]


class Turns(EvilBackend):
    """``EvilBackend`` answering request n with ``turns[n]`` (the last one again after)."""

    turns: list[Any]

    @property  # type: ignore[override]
    def answer(self) -> Any:
        return self.turns.pop(0) if len(self.turns) > 1 else self.turns[0]

    @answer.setter
    def answer(self, value: Any) -> None:
        self.turns = [value]


@pytest.fixture
def backend() -> Iterator[Turns]:
    made = Turns()
    yield made
    made.stop()


def _streamed_run(rig: Rig, backend: Turns, first: list[str]) -> list[str]:
    """Run an agent served through the dispatcher, streamed (``stream_mode="messages"``), whose
    first answer is ``first`` and second a plain "done"; the tool answers."""
    backend.turns = [first, [_event({"content": "done"}, "stop", **USAGE), "[DONE]"]]
    url = backend.url
    inventory = inventory_from_mapping(
        {"backends": [{"name": "evil", "url": url, "engine": "vllm", "models": ["scripted"]}]}
    )
    rig.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
    agent = create_gated_agent(
        rig.gate,
        name="agent",
        model=GenericFakeChatModel(messages=iter([])),  # never called: the dispatcher serves
        tools=rig.tools(),
        model_name="scripted",
        max_tokens=16,
    )
    answers = []
    for message, _ in agent.stream(GO, context=rig.agent, stream_mode="messages"):
        if isinstance(message, ToolMessage):
            answers.append(str(message.content))
    assert rig.gate.verify().first_bad_index is None
    return answers


def test_a_streamed_answer_cut_once_runs_none_of_its_calls(rig: Rig, backend: Turns) -> None:
    answers = _streamed_run(rig, backend, _stream_of("length", again=False))
    assert rig.ran == []
    assert any("cut at its output limit" in a for a in answers)
    assert any("cut at its output limit" in r for r in _pay_denials(rig))


def test_the_same_streamed_answer_finished_runs_its_complete_call(rig: Rig, backend: Turns) -> None:
    _streamed_run(rig, backend, _stream_of("tool_calls", again=False))
    assert rig.ran == ["pay:5"]  # the malformed one ({"amount": 50) is an invalid call, not run


def test_a_streamed_answer_saying_twice_it_was_cut_runs_none_of_its_calls(rig: Rig, backend: Turns) -> None:
    _streamed_run(rig, backend, _stream_of("length", again=True))
    assert rig.ran == []  # was ["pay:5"]: the complete call of the cut answer ran


# --- a tool that runs its own agent again ----------------------------------------------------


def test_a_tool_that_runs_its_agent_again_on_its_thread_does_not_hang(rig: Rig) -> None:
    config = {"configurable": {"thread_id": "again"}}
    holder: dict[str, Any] = {}
    inner: list[object] = []

    def pay(amount: int) -> str:
        rig.ran.append(f"pay:{amount}")
        if not inner:  # the first time only: run the pending tools node of this thread again
            inner.append("started")
            try:
                inner.append(holder["agent"].invoke(None, config, context=rig.agent))
            except Exception as exc:  # a typed refusal or error is fine: not a hang
                inner.append(exc)
        return f"paid {amount}"

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")
    agent = create_gated_agent(
        rig.gate,
        name="agent",
        model=ScriptedChatModel(turns=[_turn(("pay", {"amount": 5}, "call_0"))]),
        tools=[tool],
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    holder["agent"] = agent
    outer: list[object] = []
    runner = threading.Thread(
        target=lambda: outer.append(agent.invoke(GO, config, context=rig.agent)), daemon=True
    )
    runner.start()
    runner.join(6)  # deadlock detection, not a timing: the run either ends or never does
    hung = runner.is_alive()
    if hung:  # let the stuck waiter go, so that the gate can close
        for mw in _middlewares():
            with mw._calls._lock:
                events = list(mw._calls._in_flight.values())
            for event in events:
                event.set()
        runner.join(15)
    assert not hung, "the run waited for its own tool call for ever"
    assert rig.ran == ["pay:5"]  # the inner run never runs the call again


def _middlewares() -> list[Any]:
    """The live ``GateMiddleware`` objects (for the cleanup of a hung run only)."""
    import gc

    from agentgate.integrations.langgraph import GateMiddleware

    return [o for o in gc.get_objects() if isinstance(o, GateMiddleware)]
