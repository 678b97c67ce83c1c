"""Fixes in the LangGraph middleware (agentgate/integrations/langgraph/): the edges of
the three fixes that tests/test_langgraph_streaming.py and tests/test_gate_many_in_one_process.py show.

What holds:
- a model call whose stream fails is charged as reserved only when output was streamed out of it
  first (content, tool call fragments): one that fails before its first chunk, or after a chunk
  that carried only usage, is released as a failed call that produced nothing, as under
  ``invoke``; the cut is seen under LangGraph's content-block streaming too
  (``stream_events(version="v3")``, which fires no ``on_llm_new_token``), from a model that
  never calls its callbacks itself; the watch of a model call ends with it;
- ``ChatOpenAI`` on an OpenAI-compatible endpoint is asked for its streamed usage through a copy:
  the caller's model is left as it was, the copy is made once for every call of the model, and an
  explicit ``stream_usage=False`` is left alone (charged as reserved, "no usage was reported");
- a delegation tool is one only for the Gate that made it: one tool made by Gate A given to agents
  of Gate A and of Gate B delegates under A and is refused (and audited) by B; its registration
  goes with the tool.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import StructuredTool
from test_langgraph import Team, _calls, _entries, _make_team, _tool_messages, _tools
from test_langgraph import team as team  # the fixture
from test_langgraph_streaming import INPUT, USAGE, StreamedChatModel
from test_langgraph_streaming import sim_url as sim_url  # the fixture

from agentgate.integrations import langgraph as lg
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.integrations.langgraph import _calls as lg_calls
from agentgate.integrations.langgraph import _delegation as lg_delegation


def _spent(team: Team) -> int:
    return team.gate.budget_usage(team.supervisor)[team.supervisor.chain.root.id][0]


def _held(team: Team) -> int:
    team.gate.flush()
    return team.gate.ledger.usage(team.supervisor.chain.root.id)[1]


def _outcomes(team: Team) -> list[Any]:
    return [e for e in _entries(team.gate) if e.kind == "outcome"]


class FailingAtEnd(StreamedChatModel):
    """Streams the whole answer (its tool calls as fragments on the last chunk), then fails."""

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        yield from super()._stream(messages, stop, run_manager, **kw)
        raise ConnectionError("the peer closed the connection")

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in super()._astream(messages, stop, run_manager, **kw):
            yield chunk
        raise ConnectionError("the peer closed the connection")


class UsageFirst(StreamedChatModel):
    """Its first chunk carries usage only (no content, no tool call fragment), as an
    OpenAI-compatible server's stream can begin; ``cut_after=1`` fails right after it."""

    def _chunks(self, messages: list[BaseMessage]) -> list[ChatGenerationChunk]:
        usage = AIMessageChunk(
            content="",
            id="streamed",
            usage_metadata={"input_tokens": USAGE[0], "output_tokens": 0, "total_tokens": USAGE[0]},
        )
        return [ChatGenerationChunk(message=usage), *super()._chunks(messages)]


class Quiet(StreamedChatModel):
    """Streams without calling its run manager (LangChain's core reports the chunks)."""

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        yield from super()._stream(messages, stop, None, **kw)


async def _stream_through(team: Team, chat: StreamedChatModel, way: str) -> list[str]:
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    delivered: list[str] = []
    with pytest.raises(ConnectionError):
        if way == "stream":
            for chunk, _ in agent.stream(INPUT, context=team.supervisor, stream_mode="messages"):
                delivered.append(str(chunk.content))
        else:
            async for chunk, _ in agent.astream(INPUT, context=team.supervisor, stream_mode="messages"):
                delivered.append(str(chunk.content))
    return delivered


def _failed_reasons(team: Team) -> tuple[str, ...]:
    (outcome,) = _outcomes(team)
    assert outcome.status == "error"
    assert _held(team) == 0
    assert team.gate.verify().first_bad_index is None
    return tuple(outcome.reasons)


@pytest.mark.parametrize("way", ["stream", "astream"])
async def test_a_stream_that_fails_before_any_output_is_released(team: Team, way: str) -> None:
    chat = StreamedChatModel(turns=[AIMessage(content="one two three")], cut_after=0)
    assert await _stream_through(team, chat, way) == []
    assert _failed_reasons(team) == ("ConnectionError",)
    assert _spent(team) == 0
    assert chat.streamed == [1]  # it did stream


@pytest.mark.parametrize("way", ["stream", "astream"])
async def test_a_usage_only_chunk_before_the_cut_is_no_output(team: Team, way: str) -> None:
    chat = UsageFirst(turns=[AIMessage(content="one two three")], cut_after=1)
    assert await _stream_through(team, chat, way) in ([], [""])
    assert _failed_reasons(team) == ("ConnectionError",)
    assert _spent(team) == 0


@pytest.mark.parametrize("way", ["stream", "astream"])
async def test_a_stream_cut_after_its_tool_call_fragments_is_charged(team: Team, way: str) -> None:
    chat = FailingAtEnd(turns=[_calls(("search", {"query": "kv cache"}))])
    delivered = await _stream_through(team, chat, way)
    assert "".join(delivered).strip() == ""  # no text: only the tool call's fragments went out
    reasons = _failed_reasons(team)
    assert reasons[0] == "ConnectionError" and "charged as reserved" in reasons[-1]
    assert _spent(team) > sum(USAGE)  # the whole reservation
    assert team.ran == []


def test_a_cut_seen_through_content_block_streaming(team: Team) -> None:
    # LangGraph's v3 event stream drives the model through LangChain's content-block protocol:
    # no on_llm_new_token at all, and this model does not call its run manager either.
    chat = Quiet(turns=[AIMessage(content="one two three four")], cut_after=2)
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    # v3 is marked experimental, warned once a process: whether this run warns depends on the
    # tests before it (tests/test_langgraph_r84_inexact_chatopenai.py streams v3 too).
    with warnings.catch_warnings(), pytest.raises(ConnectionError):
        warnings.simplefilter("ignore")
        for _ in agent.stream_events(INPUT, context=team.supervisor, version="v3"):
            pass
    reasons = _failed_reasons(team)
    assert reasons[0] == "ConnectionError" and "charged as reserved" in reasons[-1]
    assert _spent(team) > sum(USAGE)


async def test_the_watch_ends_with_the_model_call(team: Team) -> None:
    """After a cut stream (charged), the next call of the same agent that fails before streaming
    is released, and nothing watches outside a model call."""
    chat = StreamedChatModel(turns=[AIMessage(content="one two three four")], cut_after=2)
    assert await _stream_through(team, chat, "astream") == ["one ", "two "]
    charged = _spent(team)
    assert charged > sum(USAGE)
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    with pytest.raises(ConnectionError):
        await agent.ainvoke(INPUT, context=team.supervisor)  # _agenerate fails, nothing streamed
    assert _spent(team) == charged
    assert lg_calls._WATCHED.get() is None
    assert [o.reasons[0] for o in _outcomes(team)] == ["ConnectionError", "ConnectionError"]


# --- stream_usage ----------------------------------------------------------------------------


def _chat_openai(url: str, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="scripted", base_url=url + "/v1", api_key="sk-loopback", max_tokens=16, max_retries=0, **kw
    )


def test_stream_usage_is_asked_for_through_a_copy_made_once(team: Team, sim_url: str) -> None:
    model = _chat_openai(sim_url)
    assert model.stream_usage is None  # langchain-openai's default for a base_url of one's own
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    for _ in range(2):
        assert len(list(agent.stream(INPUT, context=team.supervisor, stream_mode="messages"))) > 2
    assert model.stream_usage is None  # the caller's model is not changed
    outcomes = _outcomes(team)
    assert [(o.status, o.reasons) for o in outcomes] == [("ok", ())] * 2
    assert _spent(team) < 2 * 1024  # the usage reported, far under two reservations


def test_stream_usage_copy_is_cached_per_model(team: Team) -> None:
    model = _chat_openai("http://127.0.0.1:9")
    middleware = lg.GateMiddleware(team.gate, agent="supervisor")
    first = middleware._with_stream_usage(model)
    assert first is not model and first.stream_usage is True and model.stream_usage is None
    assert middleware._with_stream_usage(model) is first
    other = _chat_openai("http://127.0.0.1:9")
    assert middleware._with_stream_usage(other) is not first


def test_an_explicit_stream_usage_false_is_left_alone(team: Team, sim_url: str) -> None:
    model = _chat_openai(sim_url, stream_usage=False)
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    assert len(list(agent.stream(INPUT, context=team.supervisor, stream_mode="messages"))) > 2
    (outcome,) = _outcomes(team)
    assert outcome.status == "ok" and "no usage was reported; charged as reserved" in outcome.reasons


# --- delegation tools, per Gate --------------------------------------------------------------


def _researcher_tool(team: Team) -> Any:
    def search(query: str) -> str:
        team.ran.append(f"search:{query}")
        return "found"

    researcher = create_gated_agent(
        team.gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "papers"}))]),
        tools=[StructuredTool.from_function(func=search, name="search", description="search")],
    )
    return delegation_tool(
        team.gate,
        name="researcher",
        agent=researcher,
        key=team.keys["researcher"],
        capabilities=["tool:search", "model:scripted"],
        ttl=timedelta(minutes=5),
    )


def test_one_delegation_tool_under_its_gate_and_another(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _make_team(tmp_path / "a"), _make_team(tmp_path / "b")
    # B: another Gate (its own policy, keys and store), whose policy has a delegation rule too
    try:
        ask = _researcher_tool(a)
        messages = []
        for made in (a, b):
            agent = create_gated_agent(
                made.gate,
                name="supervisor",
                model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find"}))]),
                tools=[ask],
            )
            (message,) = _tool_messages(agent.invoke(INPUT, context=made.supervisor))
            messages.append(message)
        assert messages[0].status != "error" and a.ran == ["search:papers"]  # under A: delegated
        assert messages[1].status == "error" and len(a.gate.delegations) == 1  # under B: refused
        denied = [(e.kind, e.resource) for e in _entries(b.gate) if e.kind == "deny"]
        assert denied == [("deny", "tool:ask_researcher")]
        assert b.gate.verify().first_bad_index is None
    finally:
        a.gate.close()
        b.gate.close()


def test_a_delegation_tools_registration_goes_with_it(team: Team) -> None:
    ask = _researcher_tool(team)
    key = id(ask)
    assert lg_delegation._DELEGATION_TOOLS[key][0]() is ask
    del ask
    gc.collect()
    assert key not in lg_delegation._DELEGATION_TOOLS
