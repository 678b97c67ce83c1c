"""When a sync tool's call under ``ainvoke`` started (``Gate.arun``, ``_ThreadedCall``).

Under ``ainvoke`` LangChain runs a sync tool in a thread of the event loop's default executor. Its
attempt (``Gate.arun``) is entered at once, but the tool's function begins only when a thread of
that executor takes it up. A hand-built graph whose ``gated_tool_node`` gets two calls in one
answer: when the sibling pauses the run (``interrupt()``), LangGraph's node ends and the call is
left running; ``asyncio.run`` (or any shutdown that cancels the loop's tasks) then cancels it.

Defect (fixed, agentgate/gate/ ``Gate.arun`` and agentgate/integrations/langgraph/
``_ThreadedCall``; seen by review R42 as a race, 3 of 8 runs):

- A call cancelled after its attempt was entered but before the executor's thread began the
  tool was recorded ``error`` / ``CancelledError`` as *started* (it may have had its effect), so
  on resume it was refused as "already ran and failed; it may have had its effect": allowed,
  never run. Cause: ``arun`` marked the call started when its attempt coroutine was entered,
  and the attempt of a threaded tool only queues its work. The tool of a threaded call is now
  a shallow copy whose ``_run`` (bound to the original tool) notes in the worker thread that the
  work began; ``arun`` asks (``began``) once the call is cancelled and its attempt ended, and
  from then on the work does not begin (one lock: a thread that was about to begin either did,
  and the call is recorded started, or will not). A call whose work never began is recorded
  ``CancelledError: given up before the call started``, not started, and runs on resume.
  ``test_a_call_cancelled_before_its_thread_began_runs_once_on_resume``.

What holds:

- A call whose tool's function began before the cancellation is recorded as started and never
  run again on resume (``test_a_call_whose_tool_began_is_never_run_twice``).
- A call whose worker thread had taken it up (LangChain's ``on_tool_start`` callbacks run in
  it) but whose function had not begun when it was cancelled: the function never begins after,
  the call is recorded not started, and runs once on resume
  (``test_a_thread_that_takes_up_a_given_up_call_does_not_begin_it``).
- The marked copy behaves as the tool: a ``BaseTool`` subclass's ``_run`` still gets its
  ``run_manager``, and what it changes on ``self`` changes the tool the node was given.

Reproduced without timing: the loop's default executor is replaced by one that keeps the
tool's job queued (a pending ``concurrent.futures.Future``, as a busy pool would), and the sibling
interrupts only once that job is queued (``threading.Event``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForToolRun
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from pydantic import Field
from test_langgraph_langchain_features2 import Rig, _answers, _calls, _tool

from agentgate.integrations.langgraph import gated_tool_node

WAIT = 10.0  # a bound on waiting for an event that the test itself sets; never reached when it passes
ASK = {"messages": [_calls(("note", {"text": "t"}), ("route", {"to": "x"}))]}
CONFIG = {"configurable": {"thread_id": "t"}}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.gate.close()


class Pool(cf.ThreadPoolExecutor):
    """The loop's default executor: while ``hold``, a job running the tool named ``held`` stays
    queued (a pending future no thread takes up, as in a busy pool); ``queued`` is set then."""

    def __init__(self, held: str | None = None) -> None:
        super().__init__(max_workers=4)
        self.held, self.hold, self.queued = held, held is not None, threading.Event()
        self.jobs: list[cf.Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        if self.hold and self._runs_held(fn):
            job: cf.Future[Any] = cf.Future()
            self.jobs.append(job)
            self.queued.set()
            return job
        return super().submit(fn, *args, **kwargs)

    def _runs_held(self, fn: Any) -> bool:
        # LangChain's run_in_executor submits ``partial(context.run, wrapper)``, ``wrapper``
        # closing over the bound method of the tool it runs (``invoke``).
        inner = getattr(fn, "args", (None,))[0]
        cells = getattr(inner, "__closure__", None) or ()
        return any(
            getattr(getattr(c.cell_contents, "__self__", None), "name", None) == self.held for c in cells
        )


def _run(
    app: Any,
    rig: Rig,
    first: Any,
    pool: Pool,
    leftovers_done: Callable[[], None] = lambda: None,
    leftovers_cancelled: Callable[[], None] = lambda: None,
) -> Any:
    """``app.ainvoke`` on a fresh loop with ``pool`` as its default executor, then as
    ``asyncio.run`` ends: the tasks left running are cancelled and waited for.
    ``leftovers_cancelled`` is called once each of them was told to cancel (as ``asyncio.run``
    tells them, all at once), ``leftovers_done`` (from the loop) once they all ended, before the
    executor is shut down."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(pool)
        out = runner.run(app.ainvoke(first, CONFIG, context=rig.me))
        left = asyncio.all_tasks(runner.get_loop())
        for task in left:
            task.cancel()
        leftovers_cancelled()

        def ended(_: object) -> None:
            if all(task.done() for task in left):
                leftovers_done()

        for task in left:
            task.add_done_callback(ended)
        if not left:
            leftovers_done()
    return out


def _graph(rig: Rig, note: Any, route: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(rig.gate, [note, route], agent="supervisor"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile(checkpointer=InMemorySaver())


def _route(rig: Rig, ready: threading.Event) -> Any:
    def route(to: str) -> str:
        assert ready.wait(WAIT), "the sibling's work never got where the test needs it"
        answer = interrupt({"confirm": to})  # pauses the run (the tool's own question)
        rig.ran.append(f"route:{to}:{answer}")
        return "routed"

    return _tool(route)


def _outcomes(rig: Rig, resource: str) -> list[tuple[str | None, tuple[str, ...]]]:
    rig.gate.flush()
    return [
        (e.status, e.reasons)
        for e in rig.gate.audit.entries()
        if e.resource == resource and e.kind == "outcome"
    ]


def test_a_call_cancelled_before_its_thread_began_runs_once_on_resume(rig: Rig) -> None:
    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        return "noted"

    pool = Pool(held="note")
    app = _graph(rig, _tool(note), _route(rig, pool.queued))
    out = _run(app, rig, ASK, pool)
    assert out["__interrupt__"][0].value == {"confirm": "x"}
    assert rig.ran == []
    assert [job.cancelled() for job in pool.jobs] == [True]  # never taken up: the tool never began
    (first,) = _outcomes(rig, "tool:note")
    assert first[0] == "error"
    assert any("given up before the call started" in r for r in first[1]), first
    assert rig.held() == []

    out = _run(app, rig, Command(resume="yes"), Pool())
    assert "__interrupt__" not in out
    assert sorted(rig.ran) == ["note:t", "route:x:yes"]  # the allowed call ran, once
    assert {k: m.content for k, m in _answers(out).items()} == {"note-0": "noted", "route-1": "routed"}
    assert [status for status, _ in _outcomes(rig, "tool:note")] == ["error", "ok"]
    assert rig.kinds("tool:note") == ["allow", "outcome", "allow", "outcome"]
    assert rig.held() == []


def test_a_call_whose_tool_began_is_never_run_twice(rig: Rig) -> None:
    began, release = threading.Event(), threading.Event()

    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        began.set()
        assert release.wait(WAIT)  # still running when the run's leftovers are cancelled
        raise RuntimeError("the disk filled up")  # after it may have had its effect

    app = _graph(rig, _tool(note), _route(rig, began))
    out = _run(app, rig, ASK, Pool(), leftovers_cancelled=release.set)
    assert out["__interrupt__"][0].value == {"confirm": "x"}
    assert rig.ran == ["note:t"]
    (first,) = _outcomes(rig, "tool:note")
    assert first == ("error", ("RuntimeError",))  # as its tool ended, not as given up unstarted

    out = _run(app, rig, Command(resume="yes"), Pool())
    assert sorted(rig.ran) == ["note:t", "route:x:yes"]  # not run a second time
    assert "already ran and failed" in str(_answers(out)["note-0"].content)
    assert rig.kinds("tool:note") == ["allow", "outcome", "deny"]
    assert rig.held() == []


class _Holds(BaseCallbackHandler):
    """Holds the tool's worker thread in ``on_tool_start`` (LangChain calls it in the thread,
    before the tool's ``_run``) until ``release``, while ``hold``."""

    def __init__(self) -> None:
        self.hold, self.entered, self.release = True, threading.Event(), threading.Event()

    def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
        if self.hold:
            self.entered.set()
            assert self.release.wait(WAIT)


def test_a_thread_that_takes_up_a_given_up_call_does_not_begin_it(rig: Rig) -> None:
    holds = _Holds()

    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        return "noted"

    app = _graph(rig, _tool(note, callbacks=[holds]), _route(rig, holds.entered))
    # The call's thread is in on_tool_start when the call is cancelled, and goes on only after
    # the call settled: the work must not begin then (the call is recorded as not started).
    out = _run(app, rig, ASK, Pool(), leftovers_done=holds.release.set)
    assert out["__interrupt__"][0].value == {"confirm": "x"}
    assert rig.ran == []
    (first,) = _outcomes(rig, "tool:note")
    assert first[0] == "error"
    assert any("given up before the call started" in r for r in first[1]), first

    holds.hold = False
    out = _run(app, rig, Command(resume="yes"), Pool())
    assert sorted(rig.ran) == ["note:t", "route:x:yes"]
    assert _answers(out)["note-0"].content == "noted"
    assert [status for status, _ in _outcomes(rig, "tool:note")] == ["error", "ok"]
    assert rig.held() == []


class Note(BaseTool):
    """A tool class of its own (``_run``, LangChain's default ``_arun``: a worker thread)."""

    name: str = "note"
    description: str = "d"
    count: int = 0
    managed: list[bool] = Field(default_factory=list)

    def _run(self, text: str, run_manager: CallbackManagerForToolRun | None = None) -> str:
        self.count += 1
        self.managed.append(run_manager is not None)
        return f"noted {text}"


def test_the_marked_copy_runs_the_tool_itself(rig: Rig) -> None:
    tool = Note()

    def route(to: str) -> str:
        return "routed"

    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(rig.gate, [tool, _tool(route)], agent="supervisor"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    out = _run(app, rig, ASK, Pool())
    assert {k: m.content for k, m in _answers(out).items()} == {"note-0": "noted t", "route-1": "routed"}
    assert tool.count == 1  # what _run changed on self changed the node's own tool
    assert tool.managed == [True]
    assert [status for status, _ in _outcomes(rig, "tool:note")] == ["ok"]
