"""Review R91: a tool's result that ``Gate.run``'s ``failed`` read as a failure (``True``, an
exception it returned, or an exception it raised) stayed in the scheduler's result cache, and
every later call with the same ids (a retry, a LangGraph node run again with the same answer in
the same thread) was handed that failure, its tool never run again, while a tool that raised left
nothing and ran again on retry. A call the Gate settles as failed now leaves nothing for reuse.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent), and a
real LangGraph graph (``gated_tool_node``) with an in-memory checkpointer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from test_gate import Setup
from test_langgraph_middleware import Crew, _calls, _make, _tool_messages

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.integrations.langgraph import gated_tool_node
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, SyncScheduler, ToolCall

LOOKUP = Call.tool("lookup", {"id": "42"})
IDS = {"call_id": "c1", "run_id": "r1"}
REUSED = "result reused"


def _says_503(result: dict[str, int]) -> bool:
    return result["status"] != 200


def _returns_503(result: dict[str, int]) -> bool | BaseException:
    return ConnectionError("upstream 503") if result["status"] != 200 else False


def _raises_on_503(result: dict[str, int]) -> bool:
    if result["status"] != 200:
        raise ValueError("cannot read a 503")
    return False


FAILED: dict[str, Callable[[dict[str, int]], bool | BaseException]] = {
    "true": _says_503,
    "exception": _returns_503,
    "raises": _raises_on_503,
}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _outcomes(setup: Setup) -> list[AuditEntry]:
    return [entry for entry in setup.entries() if entry.kind == "outcome"]


def _flaky(ran: list[int]) -> Callable[[], dict[str, int]]:
    def lookup() -> dict[str, int]:
        ran.append(1)
        return {"status": 503} if len(ran) == 1 else {"status": 200}

    return lookup


def _run(setup: Setup, fn: Callable[[], dict[str, int]], failed: Any) -> object:
    """``Gate.run`` of ``fn`` with ``IDS``: its result, or what it raised."""
    auth = setup.gate.authorize(setup.agent, LOOKUP, **IDS)
    try:
        return setup.gate.run(auth, fn, failed=failed, **IDS)
    except Exception as exc:
        return exc


async def _arun_twice(setup: Setup, fn: Callable[[], dict[str, int]], failed: Any) -> list[object]:
    """``Gate.arun`` of ``fn`` with ``IDS`` twice, on one event loop (one scheduler, one result
    cache): their results, or what they raised."""
    got: list[object] = []
    for _ in range(2):
        auth = await asyncio.to_thread(setup.gate.authorize, setup.agent, LOOKUP, **IDS)

        async def afn() -> dict[str, int]:
            return fn()

        try:
            got.append(await setup.gate.arun(auth, afn, failed=failed, **IDS))
        except Exception as exc:
            got.append(exc)
    return got


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("how", sorted(FAILED))
def test_a_result_failed_marks_as_failed_is_not_served_to_a_retry_of_the_call(
    setup: Setup, mode: str, how: str
) -> None:
    """The retry with the same ids runs the tool and gets its own answer; the first outcome is
    an ``error``, the retry's an ``ok`` of a tool that ran (no "result reused")."""
    ran: list[int] = []
    lookup = _flaky(ran)
    if mode == "sync":
        first, second = _run(setup, lookup, FAILED[how]), _run(setup, lookup, FAILED[how])
    else:
        first, second = asyncio.run(_arun_twice(setup, lookup, FAILED[how]))
    assert first == {"status": 503} if how == "true" else isinstance(first, ConnectionError | ValueError)
    assert second == {"status": 200}
    assert len(ran) == 2  # the retry ran the tool
    failed_outcome, retried = _outcomes(setup)
    assert failed_outcome.status == "error"
    assert retried.status == "ok"
    assert not any(r.startswith(REUSED) for r in retried.reasons), retried.reasons


def test_a_result_failed_passes_is_still_served_to_a_later_call(setup: Setup) -> None:
    """Only a failed result is dropped: a good one is reused as before (review R90)."""
    ran: list[int] = []

    def lookup() -> dict[str, int]:
        ran.append(1)
        return {"status": 200}

    assert _run(setup, lookup, _says_503) == {"status": 200}
    assert _run(setup, lookup, _says_503) == {"status": 200}
    assert len(ran) == 1
    assert any(r.startswith(REUSED) for r in _outcomes(setup)[1].reasons)


@pytest.mark.parametrize("handed", [False, True])
def test_forget_result_drops_only_the_result_kept_for_the_key(tmp_path: Path, handed: bool) -> None:
    """``SyncScheduler.forget_result``, in direct mode and handed to its loop (a scheduler with a
    store): the next call with the key runs; a result no longer kept is not dropped."""
    scheduler = SyncScheduler(store=SQLiteStore(tmp_path / "tasks.db") if handed else None)
    ran: list[int] = []

    def tool(_attempt: Attempt) -> dict[str, int]:
        ran.append(1)
        return {"n": len(ran)}

    call = ToolCall("lookup", {"id": "42"}, run_id="r1", call_id="c1")
    try:
        first = scheduler.submit(call, tool)
        scheduler.forget_result(call, first)
        second = scheduler.submit(call, tool)
        scheduler.forget_result(call, first)  # not the one kept now: it stays
        assert scheduler.submit(call, tool) is second
        assert (first, second, len(ran)) == ({"n": 1}, {"n": 2}, 2)
    finally:
        scheduler.close()


@pytest.fixture
def crew(tmp_path: Path) -> Iterator[Crew]:
    made = _make(tmp_path)
    yield made
    made.gate.close()


def test_a_langgraph_error_message_is_not_replayed_when_the_node_runs_the_call_again(crew: Crew) -> None:
    """The idempotent ``search`` answers ``ToolMessage(status="error")`` (the middleware's
    ``failed``): the same answer run again in the same thread (same run and call ids) runs the
    tool again instead of replaying the error."""
    tries: list[str] = []

    def search(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        tries.append(query)
        status = "error" if len(tries) == 1 else "success"
        return ToolMessage(content=f"attempt {len(tries)}", tool_call_id=tool_call_id, status=status)

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(crew.gate, [tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    answer = _calls(("search", {"query": "q"}), answer_id="same-answer")
    first = app.invoke({"messages": [answer]}, config, context=crew.boss)
    assert [m.status for m in _tool_messages(first)] == ["error"]
    second = app.invoke({"messages": [answer]}, config, context=crew.boss)
    assert tries == ["q", "q"]
    assert _tool_messages(second)[-1].status == "success"
    outcomes = [e for e in crew.entries() if e.kind == "outcome" and e.resource == "tool:search"]
    assert [e.status for e in outcomes] == ["error", "ok"]
    assert not any(r.startswith(REUSED) for e in outcomes for r in e.reasons)
