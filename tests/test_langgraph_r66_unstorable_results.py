"""Review R66: a tool's result holding an object the run's checkpointer cannot store (an artifact
that is an object of the tool's own class, a lock, a function; LangGraph's msgpack serializer takes
none of them) is not kept: the model is told that the tool ran and its result could not be kept,
the call's outcome is ``error``, and the run goes on. Until then the call was recorded ``ok`` and
the checkpointed run ended in LangGraph's ``TypeError: Type is not msgpack serializable:
ToolMessage`` (review R60 did this for integers beyond 64 bits only:
tests/test_langgraph_r60b_unkept_results.py). Real agents, real checkpointers (in memory and a
SQLite file), sync and async."""

from __future__ import annotations

import datetime
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from test_langgraph import Team, _calls, _entries, _tool_messages
from test_langgraph import team as team  # the fixture

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "look it up"}]}


class _Handle:
    """A tool's own object: no type LangGraph's serializer knows."""


def _result(kind: str) -> Any:
    """What the tool answers: ``(content, artifact)``, or a ``Command`` for ``command``."""
    if kind == "object":
        return "found", _Handle()
    if kind == "lock-in-a-dict":
        return "found", {"rows": [1, 2], "lock": threading.Lock()}
    if kind == "function":
        return "found", lambda: "later"
    return Command(update={"messages": [ToolMessage("found", tool_call_id="search-0", artifact=_Handle())]})


def _agent(team: Team, artifact: Any, checkpointer: Any) -> Any:
    def search(query: str) -> Any:
        team.ran.append(f"search:{query}")
        return artifact

    tool = StructuredTool.from_function(
        func=search,
        name="search",
        description="search",
        response_format="content" if isinstance(artifact, Command) else "content_and_artifact",
    )
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "q"})), AIMessage(content="done")])
    return create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[tool], checkpointer=checkpointer, gate_models=False
    )


@contextmanager
def _saver(kind: str, path: Path) -> Iterator[Any]:
    if kind == "memory":
        yield InMemorySaver()
        return
    with opened(path / "checkpoints.sqlite", check_same_thread=False) as conn:
        yield SqliteSaver(conn)


@asynccontextmanager
async def _asaver(kind: str, path: Path) -> AsyncIterator[Any]:
    if kind == "memory":
        yield InMemorySaver()
        return
    async with AsyncSqliteSaver.from_conn_string(str(path / "checkpoints.sqlite")) as saver:
        yield saver


def _told_and_recorded(team: Team, result: dict[str, Any]) -> None:
    """The model was told the tool ran and its result was not kept; the run went on to its end;
    the call ran once, and its outcome is ``error``."""
    [told] = _tool_messages(result)
    assert (told.status, told.tool_call_id, told.name) == ("error", "search-0", "search")
    assert "ran, but its result holds an object the run's checkpointer cannot store" in str(told.content)
    assert "do not assume that it did not" in str(told.content)
    assert result["messages"][-1].content == "done"
    assert team.ran == ["search:q"]
    entries = [e for e in _entries(team.gate) if e.resource == "tool:search"]
    assert [(e.kind, e.status) for e in entries] == [("allow", None), ("outcome", "error")]


KINDS = ["object", "lock-in-a-dict", "function", "command"]


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_result_the_checkpointer_cannot_store_is_an_error_the_model_is_told(
    team: Team, kind: str, saver: str
) -> None:
    """Review R66: an artifact of an unknown type was recorded ok, then ended the checkpointed run in a TypeError."""
    with _saver(saver, team.path) as checkpointer:
        agent = _agent(team, _result(kind), checkpointer)
        result = agent.invoke(GO, {"configurable": {"thread_id": "t"}}, context=team.supervisor)
    _told_and_recorded(team, result)


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
@pytest.mark.parametrize("kind", KINDS)
async def test_the_same_under_ainvoke(team: Team, kind: str, saver: str) -> None:
    """Review R66: the same, in an async run (the tool a sync one, run on a worker thread)."""
    async with _asaver(saver, team.path) as checkpointer:
        agent = _agent(team, _result(kind), checkpointer)
        result = await agent.ainvoke(GO, {"configurable": {"thread_id": "t"}}, context=team.supervisor)
    _told_and_recorded(team, result)


@pytest.mark.parametrize(
    "artifact",
    [
        ("found", {"at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "ids": {1, 2}}),
        ("found", None),
        "found",
    ],
    ids=["datetime-and-set", "no-artifact", "text"],
)
def test_a_result_the_checkpointer_stores_is_kept_as_the_tool_made_it(team: Team, artifact: Any) -> None:
    """Review R66: what LangGraph's serializer takes (a datetime, a set) is kept and recorded ok."""
    if isinstance(artifact, str):
        artifact = (artifact, None)
    agent = _agent(team, artifact, InMemorySaver())
    result = agent.invoke(GO, {"configurable": {"thread_id": "t"}}, context=team.supervisor)
    [told] = _tool_messages(result)
    assert (told.status, told.content, told.artifact) == ("success", "found", artifact[1])
    entries = [e for e in _entries(team.gate) if e.resource == "tool:search"]
    assert [(e.kind, e.status) for e in entries] == [("allow", None), ("outcome", "ok")]


def test_without_a_checkpointer_nothing_is_stored_and_the_result_is_kept(team: Team) -> None:
    """Review R66: a run without a checkpointer stores no result: the tool's object reaches the model's turn."""
    handle = _Handle()
    agent = _agent(team, ("found", handle), None)
    result = agent.invoke(GO, context=team.supervisor)
    [told] = _tool_messages(result)
    assert (told.status, told.artifact) == ("success", handle)
