"""A run resumed while calls of its first run still run in this process waits for them without
holding the loop's worker threads.

LangGraph's async tools node leaves a model answer's other calls running when one of them pauses
for an approval; the resumed run decides each of them only after its first attempt ended
(``GateMiddleware._ran_here``). It waited for that in a worker thread of the loop's default
executor, one thread per call: with as many waiting calls as the executor has threads (six on a
two-core machine), the calls they waited for could never get a thread to be decided or to run
their sync tool, and the resumed run hung for good."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import test_langgraph as team_module
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from test_langgraph import Team, _calls, _entries

from agentgate.gate import AgentIdentity
from agentgate.integrations.langgraph import GateMiddleware

WAIT = 30.0  # a bound on a run that the test itself lets finish; never reached when it passes
SEARCHES = 3


@pytest.fixture
def one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    """tests/test_langgraph.py's team, its ``search`` tool run once at a time and never again."""
    text = team_module._policy_text

    def policy(*args: Any, **kwargs: Any) -> str:
        made = text(*args, **kwargs)
        assert "idempotent: true\n    concurrency: 2" in made
        return made.replace("idempotent: true\n    concurrency: 2", "idempotent: false\n    concurrency: 1")

    monkeypatch.setattr(team_module, "_policy_text", policy)
    team = team_module._make_team(tmp_path)
    yield team
    team.gate.close()


def tools_graph(node: Any) -> Any:
    """A graph of one tools node, ``node``, run once per invocation, checkpointed in memory."""
    graph = StateGraph(MessagesState, context_schema=AgentIdentity)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile(checkpointer=InMemorySaver())


def as_tools(*functions: Callable[..., Any]) -> list[BaseTool]:
    """Each of ``functions`` as a LangChain tool of its own name."""
    return [StructuredTool.from_function(func=f, name=f.__name__, description="t") for f in functions]


def middleware_tool_node(middleware: GateMiddleware, *functions: Callable[..., Any]) -> ToolNode:
    """A hand-built graph's ``ToolNode`` of ``functions`` with ``middleware``'s tool hooks."""
    return ToolNode(
        as_tools(*functions),
        wrap_tool_call=middleware.wrap_tool_call,
        awrap_tool_call=middleware.awrap_tool_call,
    )


async def test_a_resumed_run_waits_for_its_first_runs_calls_without_taking_their_threads(
    one_at_a_time: Team,
) -> None:
    """Review R57: a resumed run waiting for its first run's calls took every worker thread and hung."""
    team = one_at_a_time
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))  # a busy machine's executor, at its limit
    all_asked_again = threading.Event()

    def search(query: str) -> str:
        # The first run's first search holds the one slot until the resumed run has asked for
        # every search again: they all wait for the first run's calls then.
        assert all_asked_again.wait(WAIT)
        team.ran.append(f"search:{query}")
        return f"results for {query}"

    def publish(path: str) -> str:
        team.ran.append(f"publish:{path}")
        return f"published {path}"

    middleware = GateMiddleware(team.gate, agent="supervisor")
    asked: list[str] = []
    ran_here = middleware._ran_here

    def counted(key: tuple[str | None, str | None, str]) -> Any:
        mine, busy = ran_here(key)
        if key[2].startswith("search") and busy is not None and key[2] not in asked:
            asked.append(key[2])
            if len(asked) == SEARCHES:
                all_asked_again.set()
        return mine, busy

    middleware._ran_here = counted  # type: ignore[method-assign]
    agent = tools_graph(middleware_tool_node(middleware, search, publish))
    config: Any = {"configurable": {"thread_id": "busy"}}
    answer = _calls(
        ("publish", {"path": "reports/q"}), *[("search", {"query": f"q{i}"}) for i in range(SEARCHES)]
    )

    paused = await agent.ainvoke({"messages": [answer]}, config, context=team.supervisor)
    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    try:
        done = await asyncio.wait_for(
            agent.ainvoke(Command(resume=approval), config, context=team.supervisor), WAIT
        )
    except TimeoutError:
        # Hung: give the calls waited for threads of their own, so that the test ends.
        all_asked_again.set()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2 * SEARCHES + 2))
        pytest.fail("the resumed run hung: its waiting calls held every worker thread")

    answers = {m.tool_call_id: m for m in done["messages"] if isinstance(m, ToolMessage)}
    assert sorted(team.ran) == ["publish:reports/q", *[f"search:q{i}" for i in range(SEARCHES)]]
    assert [answers[f"search-{i}"].status for i in range(1, SEARCHES + 1)] == ["success"] * SEARCHES
    assert answers["publish-0"].status == "success"
    searches = [e.kind for e in _entries(team.gate) if e.resource == "tool:search"]
    assert searches.count("allow") == searches.count("outcome") == SEARCHES  # each ran once, recorded
