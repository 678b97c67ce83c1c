"""The tool hook's checks of the answer that asked for a call (its calls sharing an id, a number
no float holds as the model wrote it, the answer's version) read that answer once per answer, not
once per call: an answer of ``N`` tool calls costs agentgate ``O(N)`` visits to its calls, with
the same decisions as when each call read the whole answer."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from test_langgraph import Team, _make_team, _tools
from test_langgraph import team as team  # the fixture
from test_langgraph_r68_invalid_tool_calls import GO, _Answers, _tool_entries

import agentgate
from agentgate.integrations.langgraph import _scope, create_gated_agent, gated_tool_node
from agentgate.integrations.langgraph._scope import KEPT_ANSWERS, _answer_calls, _calls_sharing

AGENTGATE = str(Path(agentgate.__file__).parent)


class _Visited(list[Any]):
    """A list of tool calls counting each item agentgate's own code takes from it (by the module
    that iterates it), so that LangChain's and LangGraph's visits are not counted."""

    def __init__(self, items: list[Any], visits: list[int]) -> None:
        super().__init__(items)
        self.visits = visits

    def __iter__(self) -> Iterator[Any]:
        ours = sys._getframe(1).f_code.co_filename.startswith(AGENTGATE)
        for item in super().__iter__():
            if ours:
                self.visits[0] += 1
            yield item


def _answer(
    count: int, visits: list[int], *, shared: int | None = None, inexact: int | None = None
) -> AIMessage:
    """An answer of ``count`` calls of ``search`` as an OpenAI model gives it (the calls parsed,
    and as written in ``additional_kwargs``), whose lists count agentgate's visits in ``visits``;
    the call ``shared`` takes the id of the call before it, the call ``inexact`` was written with
    a number no float holds."""
    ids = [f"c{n - 1}" if n == shared else f"c{n}" for n in range(count)]
    written = [
        json.dumps({"query": str(n)}) if n != inexact else '{"query": "x", "limit": 100.00000000000000001}'
        for n in range(count)
    ]
    calls = [
        {"name": "search", "args": json.loads(text), "id": i} for i, text in zip(ids, written, strict=True)
    ]
    raw = [
        {"id": i, "type": "function", "function": {"name": "search", "arguments": text}}
        for i, text in zip(ids, written, strict=True)
    ]
    answer = AIMessage(content="", tool_calls=calls, additional_kwargs={"tool_calls": raw})
    # Set after the message is made: pydantic would copy them into plain lists.
    answer.tool_calls = _Visited(answer.tool_calls, visits)
    answer.additional_kwargs["tool_calls"] = _Visited(raw, visits)
    return answer


def _run(team: Team, answer: AIMessage, *, asynchronous: bool, built: str) -> list[ToolMessage]:
    """The tool messages of a run, in a thread with a checkpointer (each call then has a version,
    ``_asked_in``), of an agent whose model answers ``answer`` (``create_gated_agent``: each call
    a task of its own), or of a hand-built graph whose state holds ``answer`` (``gated_tool_node``:
    the answer's calls in one task)."""
    config = {"configurable": {"thread_id": "t"}}
    if built == "create_gated_agent":
        app = create_gated_agent(
            team.gate,
            name="supervisor",
            model=_Answers(answers=[answer]),
            model_name="scripted",
            tools=_tools(team),
            gate_models=False,
            checkpointer=InMemorySaver(),
        )
        state: dict[str, Any] = GO
    else:
        graph = StateGraph(MessagesState)
        graph.add_node("tools", gated_tool_node(team.gate, _tools(team), agent="supervisor"))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        app = graph.compile(checkpointer=InMemorySaver())
        state = {"messages": [answer]}
    if asynchronous:
        result = asyncio.run(app.ainvoke(state, config, context=team.supervisor))
    else:
        result = app.invoke(state, config, context=team.supervisor)
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


RUNS = pytest.mark.parametrize(
    ("asynchronous", "built"),
    [(a, b) for a in (False, True) for b in ("create_gated_agent", "gated_tool_node")],
    ids=[f"{a}-{b}" for a in ("invoke", "ainvoke") for b in ("agent", "node")],
)


@RUNS
def test_an_answer_of_many_calls_keeps_its_decisions(team: Team, asynchronous: bool, built: str) -> None:
    """Review R69: the decisions read once per answer are those read per call: of an answer of
    60 calls, the two sharing an id are refused (none of them runs), the one written with a
    number no float holds is refused, and the other 57 run."""
    messages = _run(team, _answer(60, [0], shared=20, inexact=40), asynchronous=asynchronous, built=built)
    refused = {m.tool_call_id: str(m.content) for m in messages if m.status == "error"}
    assert sorted(team.ran) == sorted(f"search:{n}" for n in range(60) if n not in (19, 20, 40))
    assert set(refused) == {"c19", "c40"} and len([m for m in messages if m.tool_call_id == "c19"]) == 2
    assert "gives the tool call id 'c19' to 2 calls" in refused["c19"]
    assert "argument 'limit' is 100.00000000000000001, a number no float holds" in refused["c40"]
    denies = [e for e in _tool_entries(team) if e.kind == "deny"]
    assert len(denies) == 3


@RUNS
def test_the_calls_of_an_answer_are_read_once_per_answer(
    tmp_path: Path, asynchronous: bool, built: str
) -> None:
    """Review R69: each tool call of an answer read the whole answer again (its calls for one
    sharing the id, the calls as written for its text, all its calls for its version), so an
    answer of N calls cost agentgate some 5 N**2 visits to its calls (200,000 at 200 calls; some
    2,000,000 steps at 1,500). Now the answer is read once: a fixed number of visits per call,
    four times as many for four times the calls."""
    counted = {}
    for count in (50, 200):
        visits = [0]
        team = _make_team(tmp_path / str(count))
        try:
            messages = _run(team, _answer(count, visits), asynchronous=asynchronous, built=built)
            assert len(team.ran) == count and all(m.status == "success" for m in messages)
        finally:
            team.gate.close()
        counted[count] = visits[0]
    assert counted[200] == 4 * counted[50]
    # The model hook's passes over the calls and the calls as written (``_storable_answer``), and
    # the tool hook's one read of each.
    assert counted[200] <= 4 * 200


def test_an_answer_edited_in_place_is_read_again() -> None:
    """Review R69: an answer's calls replaced or added to in place (another middleware's edit)
    are read again, never taken from what the answer held before."""
    answer = AIMessage(content="", tool_calls=[{"name": "search", "args": {}, "id": "c1"}])
    assert _calls_sharing(answer, "c1") == 1
    answer.tool_calls.append({"name": "search", "args": {}, "id": "c1", "type": "tool_call"})
    assert _calls_sharing(answer, "c1") == 2
    answer.tool_calls = [{"name": "search", "args": {}, "id": "c2", "type": "tool_call"}]
    assert (_calls_sharing(answer, "c1"), _calls_sharing(answer, "c2")) == (0, 1)
    before = _answer_calls(answer).version
    answer.id = "other"
    assert _answer_calls(answer).version not in (None, before)


def test_an_answers_version_is_the_digest_it_was() -> None:
    """Review R69: the version read once per answer is the digest each call made of it, which
    approval requests in a store hold (``Gate.authorize``'s ``asked_in``)."""
    answer = AIMessage(content="", id="a1", tool_calls=[{"name": "search", "args": {"q": [1]}, "id": "c1"}])
    shown = json.dumps([["c1", "search", {"q": [1]}]])
    text = json.dumps(["a1", json.loads(shown)], sort_keys=True, ensure_ascii=True)
    assert _answer_calls(answer).version == hashlib.sha256(text.encode()).hexdigest()


def test_answers_read_are_not_kept_alive_and_are_bounded() -> None:
    """Review R69: what is read of an answer is kept for the next call of the same answer, never
    keeping the answer alive nor growing without bound."""
    answer = AIMessage(content="", tool_calls=[{"name": "search", "args": {}, "id": "c1"}])
    _answer_calls(answer)
    gone = weakref.ref(answer)
    del answer
    gc.collect()
    assert gone() is None
    kept = [AIMessage(content="", tool_calls=[{"name": "s", "args": {}, "id": f"c{n}"}]) for n in range(100)]
    for answer in kept:
        _answer_calls(answer)
    assert len(_scope._ANSWERS) <= KEPT_ANSWERS
