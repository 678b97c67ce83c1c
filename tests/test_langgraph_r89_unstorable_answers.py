"""Review R89: a model's answer the run's checkpointer cannot store (a tool call's arguments
holding a key with a lone surrogate, which ``json.loads`` reads from the escape ``"\\ud800"`` a
model writes, or objects nested past msgpack's limit, which ``json.loads`` reads to about 1,000
levels) is kept without that call's arguments, the call refused with a reason the model is told,
and the run goes on, as for an integer beyond 64 bits (review R58) and for a tool's result the
checkpointer cannot store (review R66). Until then the checkpointed run ended in LangGraph's
``TypeError: Type is not msgpack serializable: AIMessage``, the call's ``deny`` recorded and the
model never told why. Real agents, real checkpointers (in memory and a SQLite file), sync and
async, with and without gated model calls."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pydantic import ConfigDict
from test_langgraph import Team, _entries, _tool_messages
from test_langgraph import team as team  # the fixture

from agentgate.errors import InputError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.integrations.langgraph._tool_calls import _storable_answer

GO = {"messages": [{"role": "user", "content": "look it up"}]}
CONFIG = {"configurable": {"thread_id": "t"}}

WRITTEN = {
    "surrogate key": '{"query": "q", "\\ud800": 1}',
    "nested 260": '{"query": "q", "n": ' + '{"a": ' * 260 + "1" + "}" * 260 + "}",
}
"""Arguments as a model writes them, read as LangChain's OpenAI parser reads them (``json.loads``)."""

UNSTORABLE_KEY = "agentgate_unstorable"
"""Where an answer kept names the calls refused so (docs/langgraph.md)."""

LEFT_OUT_KEY = "agentgate_left_out"
"""Where an answer kept names its other parts left out."""

SAID = "the tool call's arguments hold what the run's checkpointer cannot store"


def _answer(args: dict[str, Any]) -> AIMessage:
    """A call the checkpointer cannot store beside one it can."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "search", "args": args, "id": "bad"},
            {"name": "search", "args": {"query": "fine"}, "id": "good"},
        ],
    )


def _agent(team: Team, answer: AIMessage, checkpointer: Any, gate_models: bool) -> Any:
    def search(query: str) -> str:
        team.ran.append(f"search:{query}")
        return "found"

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    model = ScriptedChatModel(turns=[answer, AIMessage(content="done")])
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=model,
        tools=[tool],
        checkpointer=checkpointer,
        gate_models=gate_models,
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


def _refused_told_and_kept(team: Team, result: dict[str, Any], gate_models: bool) -> None:
    """The call the checkpointer cannot store was refused before it was decided, the model told
    why; its sibling ran; the run went on to its end; the answer kept holds the refused call
    without arguments, marked refused."""
    told = {m.tool_call_id: m for m in _tool_messages(result)}
    assert told["bad"].status == "error"
    assert SAID in str(told["bad"].content)
    assert told["good"].status == "success"
    assert team.ran == ["search:fine"]
    assert result["messages"][-1].content == "done"
    [kept] = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert [c["args"] for c in kept.tool_calls] == [{}, {"query": "fine"}]
    assert list(kept.response_metadata[UNSTORABLE_KEY]) == ["bad"]
    searches = [e for e in _entries(team.gate) if e.resource == "tool:search"]
    denied = [e for e in searches if e.kind == "deny"]
    assert len(denied) == 1
    assert SAID in " ".join(denied[0].reasons)
    if gate_models:  # both model calls were decided and ran
        models = [(e.kind, e.status) for e in _entries(team.gate) if e.resource == "model:scripted"]
        assert models == [("allow", None), ("outcome", "ok")] * 2


@pytest.mark.parametrize("gate_models", [False, True])
@pytest.mark.parametrize("saver", ["memory", "sqlite"])
@pytest.mark.parametrize("form", list(WRITTEN))
def test_an_answer_the_checkpointer_cannot_store_refuses_its_call_and_the_run_goes_on(
    team: Team, form: str, saver: str, gate_models: bool
) -> None:
    """Review R89: such an answer ended the checkpointed run in LangGraph's TypeError."""
    with _saver(saver, team.path) as checkpointer:
        agent = _agent(team, _answer(json.loads(WRITTEN[form])), checkpointer, gate_models)
        result = agent.invoke(GO, CONFIG, context=team.supervisor)
        _refused_told_and_kept(team, result, gate_models)
        assert agent.get_state(CONFIG).values["messages"][-1].content == "done"  # the thread was kept


@pytest.mark.parametrize("gate_models", [False, True])
@pytest.mark.parametrize("saver", ["memory", "sqlite"])
@pytest.mark.parametrize("form", list(WRITTEN))
async def test_the_same_under_ainvoke(team: Team, form: str, saver: str, gate_models: bool) -> None:
    """Review R89: the same, in an async run."""
    async with _asaver(saver, team.path) as checkpointer:
        agent = _agent(team, _answer(json.loads(WRITTEN[form])), checkpointer, gate_models)
        result = await agent.ainvoke(GO, CONFIG, context=team.supervisor)
        _refused_told_and_kept(team, result, gate_models)
        assert (await agent.aget_state(CONFIG)).values["messages"][-1].content == "done"


def test_a_content_block_holding_the_arguments_is_left_out_and_named(team: Team) -> None:
    """Review R89: a content list holding the same arguments (LangChain's ``output_version="v1"``
    tool call block) is kept with a text block in that item's place, named in the metadata."""
    args = json.loads(WRITTEN["surrogate key"])
    answer = AIMessage(
        content=[
            {"type": "text", "text": "looking"},
            {"type": "tool_call", "name": "search", "args": args, "id": "bad"},
        ],
        tool_calls=[{"name": "search", "args": args, "id": "bad"}],
    )
    agent = _agent(team, answer, InMemorySaver(), gate_models=False)
    result = agent.invoke(GO, CONFIG, context=team.supervisor)
    [told] = _tool_messages(result)
    assert told.status == "error" and SAID in str(told.content)
    assert team.ran == []
    [kept] = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert kept.content[0] == {"type": "text", "text": "looking"}
    assert "cannot store was left out" in kept.content[1]["text"]
    assert kept.response_metadata[LEFT_OUT_KEY] == ["content[1]"]


def test_metadata_the_checkpointer_cannot_store_is_left_out_and_named() -> None:
    """Review R89: an entry of ``additional_kwargs`` (a parsed answer) that cannot be stored is left
    out, the rest kept; an answer the checkpointer stores, or one without a checkpointer, is kept
    as it is."""
    serde = JsonPlusSerializer()
    parsed = json.loads(WRITTEN["surrogate key"])
    answer = AIMessage(content="x", additional_kwargs={"parsed": parsed, "refusal": None})
    kept = _storable_answer(answer, serde)
    assert kept.additional_kwargs == {"refusal": None}
    assert kept.response_metadata[LEFT_OUT_KEY] == ["additional_kwargs['parsed']"]
    serde.dumps_typed(kept)
    assert _storable_answer(answer, None) is answer
    plain = AIMessage(content="x", tool_calls=[{"name": "search", "args": {"query": "q"}, "id": "c"}])
    assert _storable_answer(plain, serde) is plain


class _Holding(AIMessage):
    """An answer of a model's own class, with a field no checkpointer stores."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    handle: Any = None


def test_an_answer_that_cannot_be_made_storable_is_a_typed_error() -> None:
    """Review R89: an answer whose own field cannot be stored is refused with ``InputError``,
    not msgpack's TypeError."""
    with pytest.raises(InputError, match="holds what the run's checkpointer cannot store outside"):
        _storable_answer(_Holding(content="x", handle=threading.Lock()), JsonPlusSerializer())
