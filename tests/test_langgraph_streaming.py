"""The LangGraph middleware under ``stream`` / ``astream`` / ``astream_events``.

Users rarely call ``invoke()``: they stream (``stream_mode`` "updates", "messages", "values",
several at once, ``astream_events(version="v2")``, ``subgraphs=True``). Each test runs the real
langgraph / langchain packages with a scripted chat model that really streams (words as chunks,
tool calls as ``tool_call_chunks``, usage spread over the chunks as Anthropic's stream reports it:
input tokens on the first chunk, output tokens on the last), and compares with ``invoke``.

What holds:
- the token budget of a streamed model call is committed at the usage its chunks report, in every
  stream mode, sync and async (the same spend as ``invoke``), and the audit log verifies;
- a consumer that stops an ``astream`` mid-answer (``break`` then ``aclose()``, or the generator
  dropped and garbage collected) leaves no reservation held: the model call is an ``error``
  outcome charged as reserved (docs/langgraph.md, Budgets); a sync ``stream`` closed mid-answer
  waits for the model call, which is settled at its real usage;
- a consumer that stops an ``astream`` while tool calls hold the tool's concurrency slots (and one
  waits for a slot) leaves no slot and no reservation held: async tools are cancelled and
  released, a sync tool runs to its end and is charged, the waiting call is given up before it
  started; a later run gets both slots; every decided call has its outcome entry; the log
  verifies. The same holds inside a sub-agent streamed with ``subgraphs=True``;
- an approval interrupt appears in the stream (``__interrupt__`` in "updates" and "values" modes,
  in ``astream_events``) with the payload docs/langgraph.md describes, and resuming with
  ``Command(resume=approval)`` through ``stream`` / ``astream`` runs the call once, as ``invoke``
  does; a "deny" resume through ``astream`` refuses it;
- a sub-agent behind ``delegation_tool`` streamed with ``subgraphs=True`` (sync and async, and
  ``astream_events``) streams under its own namespace, pauses the supervisor for its approval,
  resumes through the stream, and leaves the same audit entries as under ``invoke``;
- no stream mode (nor ``astream_events``) carries a grant token or a private key.

Fixed in the fix round (were strict xfails; tests/test_langgraph_stream_charges.py has more):
- a streamed model call whose stream fails after output reached the consumer was charged nothing
  (its reservation released), where the gateway charges such a cut stream its reservation;
- ``ChatOpenAI`` pointed at an OpenAI-compatible server (vLLM, SGLang: the backends agentgate
  targets) does not ask for the usage event when streaming, so under ``stream_mode="messages"``
  every model call is charged its estimated reservation and audited "no usage was reported",
  where ``invoke`` commits the usage the backend reported (the middleware now asks for it);

Fixed in session 14 (was a strict xfail, documented as a limitation):
- with a dispatcher attached, the middleware's ``DispatchedChatModel`` could not stream: under
  ``stream_mode="messages"`` the consumer got the whole answer in one piece after the whole
  generation (tests/test_dispatched_streaming.py has more);
- (not streaming-specific, found on the way; fixed by the lead) the same approval request had two
  payload shapes: as first asked it had no ``approved_by``, found open again ``approved_by: []``.

Seen, not a defect of agentgate: a sync ``stream`` closed while a tool call waits for a slot
still runs that call afterwards (LangGraph's sync executor gives a running task no signal; every
call is settled and audited); under ``astream`` the same call is given up before it starts.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.types import Command, Interrupt
from pydantic import Field
from test_langgraph import Team, _ask_researcher, _calls, _entries, _make_team, _publisher, _tools
from test_langgraph import team as team  # the fixture

from agentgate.gate import Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

INPUT = {"messages": [{"role": "user", "content": "go"}]}
USAGE = (7, 3)
"""What the streamed model reports for each call: the policy prices a token at 1 micro-dollar,
so each model call that commits its real usage spends 10; its reservation is far more (the
prompt's estimate plus 1024)."""


class StreamedChatModel(ScriptedChatModel):
    """``ScriptedChatModel`` that streams: each word a chunk, the tool calls as
    ``tool_call_chunks`` on the last, the input tokens on the first chunk and the output tokens on
    the last. ``pause`` seconds between chunks; ``cut_after``: the stream fails
    (``ConnectionError``) after that many chunks, and so does the non-streamed call."""

    pause: float = 0.0
    cut_after: int | None = None
    streamed: list[int] = Field(default_factory=list)

    def _message(self, messages: list[BaseMessage]) -> AIMessage:
        message, _ = self._answer(messages)
        message.usage_metadata = {
            "input_tokens": USAGE[0],
            "output_tokens": USAGE[1],
            "total_tokens": sum(USAGE),
        }
        return message

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.cut_after is not None:
            raise ConnectionError("the peer closed the connection")
        return ChatResult(generations=[ChatGeneration(message=self._message(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._generate(messages)

    def _chunks(self, messages: list[BaseMessage]) -> list[ChatGenerationChunk]:
        message = self._message(messages)
        words = str(message.content).split(" ") if message.content else [""]
        chunks = [AIMessageChunk(content=w + " ", id="streamed") for w in words]
        chunks[0].usage_metadata = {"input_tokens": USAGE[0], "output_tokens": 0, "total_tokens": USAGE[0]}
        last = AIMessageChunk(
            content="",
            id="streamed",
            chunk_position="last",
            tool_call_chunks=[
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"]),
                    "id": c["id"],
                    "index": i,
                    "type": "tool_call_chunk",
                }
                for i, c in enumerate(message.tool_calls)
            ],
            usage_metadata={"input_tokens": 0, "output_tokens": USAGE[1], "total_tokens": USAGE[1]},
        )
        return [ChatGenerationChunk(message=m) for m in [*chunks, last]]

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        self.streamed.append(1)
        for n, chunk in enumerate(self._chunks(messages)):
            if n == self.cut_after:
                raise ConnectionError("the peer closed the connection")
            if run_manager:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk
            time.sleep(self.pause)

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        self.streamed.append(1)
        for n, chunk in enumerate(self._chunks(messages)):
            if n == self.cut_after:
                raise ConnectionError("the peer closed the connection")
            if run_manager:
                await run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk
            await asyncio.sleep(self.pause)


def _spent(team: Team) -> int:
    return team.gate.budget_usage(team.supervisor)[team.supervisor.chain.root.id][0]


def _held(gate: Gate, *grants: str) -> int:
    """What reservations not settled yet hold of the grants' budgets."""
    gate.flush()
    return sum(gate.ledger.usage(g)[1] for g in grants)


def _outcomes(gate: Gate) -> list[Any]:
    return [e for e in _entries(gate) if e.kind == "outcome"]


def _audit_complete(gate: Gate) -> None:
    """Every allowed tool or model call has exactly one outcome entry, and the log verifies."""
    entries = _entries(gate)
    allowed = sorted(
        e.index for e in entries if e.kind == "allow" and e.resource.startswith(("tool:", "model:"))
    )
    settled = sorted(e.ref for e in entries if e.kind == "outcome")
    assert settled == allowed
    assert gate.verify().first_bad_index is None


def _streamed_agent(team: Team, **model: Any) -> tuple[Any, StreamedChatModel]:
    chat = StreamedChatModel(
        turns=[_calls(("search", {"query": "kv cache"})), AIMessage(content="the kv cache holds it")], **model
    )
    return create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team)), chat


# --- usage of streamed model calls -----------------------------------------------------------

SYNC_WAYS = ["invoke", "updates", "messages", "values", "updates+messages"]
ASYNC_WAYS = ["ainvoke", "astream-updates", "astream-messages", "astream_events"]
STREAMING = {"messages", "updates+messages", "astream-messages", "astream_events"}
"""The ways in which LangGraph has the chat model stream (a streaming callback handler is there)."""


@pytest.mark.parametrize("way", SYNC_WAYS)
def test_streamed_model_usage_is_committed_sync(team: Team, way: str) -> None:
    agent, chat = _streamed_agent(team)
    if way == "invoke":
        agent.invoke(INPUT, context=team.supervisor)
    else:
        for _ in agent.stream(INPUT, context=team.supervisor, stream_mode=way.split("+")):
            pass
    assert len(chat.streamed) == (2 if way in STREAMING else 0)  # the path under test really streamed
    assert team.ran == ["search:kv cache"]
    assert _spent(team) == 2 * sum(USAGE)  # two model calls, each at the usage its chunks reported
    assert [o.reasons for o in _outcomes(team.gate)] == [()] * 3
    _audit_complete(team.gate)


@pytest.mark.parametrize("way", ASYNC_WAYS)
async def test_streamed_model_usage_is_committed_async(team: Team, way: str) -> None:
    agent, chat = _streamed_agent(team)
    if way == "ainvoke":
        await agent.ainvoke(INPUT, context=team.supervisor)
    elif way == "astream_events":
        async for _ in agent.astream_events(INPUT, context=team.supervisor, version="v2"):
            pass
    else:
        async for _ in agent.astream(INPUT, context=team.supervisor, stream_mode=way.split("-")[1]):
            pass
    assert len(chat.streamed) == (2 if way in STREAMING else 0)
    assert team.ran == ["search:kv cache"]
    assert _spent(team) == 2 * sum(USAGE)
    _audit_complete(team.gate)


# --- a consumer that stops reading -----------------------------------------------------------


@pytest.mark.parametrize("drop", ["aclose", "garbage collected"])
async def test_astream_abandoned_mid_answer_settles_the_model_call(team: Team, drop: str) -> None:
    chat = StreamedChatModel(turns=[AIMessage(content="one two three four five six seven eight")], pause=0.02)
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    stream = agent.astream(INPUT, context=team.supervisor, stream_mode="messages")
    async for chunk, _ in stream:
        assert isinstance(chunk, AIMessageChunk) and chunk.content == "one "
        break
    if drop == "aclose":
        await stream.aclose()
    else:
        del stream, chunk
        gc.collect()  # the event loop's finalizer hook closes the generator
        for _ in range(500):
            if _outcomes(team.gate):
                break
            await asyncio.sleep(0.01)
    (outcome,) = _outcomes(team.gate)
    # Cancelled while it generated: charged as reserved (docs/langgraph.md, Budgets), never held.
    assert outcome.status == "error" and outcome.reasons[0] == "CancelledError"
    assert "charged as reserved" in outcome.reasons[-1]
    assert _spent(team) > sum(USAGE)
    assert _held(team.gate, team.supervisor.chain.root.id) == 0
    _audit_complete(team.gate)


def test_sync_stream_closed_mid_answer_settles_the_model_call_at_its_usage(team: Team) -> None:
    chat = StreamedChatModel(turns=[AIMessage(content="one two three four five six")], pause=0.01)
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    stream = agent.stream(INPUT, context=team.supervisor, stream_mode="messages")
    for chunk, _ in stream:
        assert chunk.content == "one "
        break
    stream.close()  # LangGraph waits for the running model call
    assert [(o.status, o.reasons) for o in _outcomes(team.gate)] == [("ok", ())]
    assert _spent(team) == sum(USAGE)
    assert _held(team.gate, team.supervisor.chain.root.id) == 0
    _audit_complete(team.gate)


def _blocking_search(team: Team, *, sync: bool, release: threading.Event) -> BaseTool:
    """``search``: a query starting with "slow" says so on the custom stream and waits for
    ``release``; any other query answers at once."""

    def search(query: str) -> str:
        if query.startswith("slow"):
            get_stream_writer()({"started": query})
            release.wait(10)
        team.ran.append(query)
        return f"results for {query}"

    async def asearch(query: str) -> str:
        if query.startswith("slow"):
            get_stream_writer()({"started": query})
            while not release.is_set():
                await asyncio.sleep(0.005)
        team.ran.append(query)
        return f"results for {query}"

    if sync:
        return StructuredTool.from_function(func=search, name="search", description="search")
    return StructuredTool.from_function(coroutine=asearch, name="search", description="search")


async def _both_slots_free(team: Team, tool: BaseTool) -> None:
    """A fresh run whose two calls of ``search`` (concurrency 2) finish: no slot was kept."""
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "a"}), ("search", {"query": "b"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[tool], gate_models=False)
    result = await asyncio.wait_for(agent.ainvoke(INPUT, context=team.supervisor), 10)
    assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["success"] * 2


@pytest.mark.parametrize("sync_tool", [False, True], ids=["async-tool", "sync-tool"])
async def test_astream_abandoned_while_tools_hold_slots_leaks_nothing(
    tmp_path: Path, sync_tool: bool
) -> None:
    made = _make_team(tmp_path, budget=50, unit="calls")
    try:
        release = threading.Event()
        tool = _blocking_search(made, sync=sync_tool, release=release)
        # search has concurrency 2: two calls start, the third waits for a slot.
        model = ScriptedChatModel(turns=[_calls(*[("search", {"query": f"slow{i}"}) for i in range(3)])])
        agent = create_gated_agent(made.gate, name="supervisor", model=model, tools=[tool])
        stream = agent.astream(INPUT, context=made.supervisor, stream_mode="custom")
        started = []
        async for event in stream:
            started.append(event["started"])
            if len(started) == 2:
                break
        asyncio.get_running_loop().call_later(0.05, release.set)  # a sync tool's thread ends on its own
        await stream.aclose()
        outcomes = [(o.resource, o.status, o.reasons) for o in _outcomes(made.gate)]
        given_up = ("tool:search", "error", ("CancelledError: given up before the call started",))
        assert outcomes.count(given_up) == 1  # the call that waited for a slot never ran
        ran = [o for o in outcomes if o[0] == "tool:search" and o != given_up]
        if sync_tool:  # its threads ran to their end: recorded and charged as they ended
            assert [o[1:] for o in ran] == [("ok", ())] * 2 and len(made.ran) == 2
        else:
            assert [o[1:] for o in ran] == [("error", ("CancelledError",))] * 2 and made.ran == []
        root = made.supervisor.chain.root.id
        assert _held(made.gate, root) == 0
        assert _spent(made) == 1 + (2 if sync_tool else 0)  # the model call, and the tool calls that ran
        _audit_complete(made.gate)
        await _both_slots_free(made, tool)
        _audit_complete(made.gate)
    finally:
        made.gate.close()


async def test_astream_abandoned_inside_a_sub_agent_leaks_nothing(tmp_path: Path) -> None:
    made = _make_team(tmp_path, budget=50, unit="calls")
    try:
        release = threading.Event()
        tool = _blocking_search(made, sync=False, release=release)
        researcher = create_gated_agent(
            made.gate,
            name="researcher",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "slow papers"}))]),
            tools=[tool],
        )
        ask = _ask_researcher(made, agent=researcher, budget=5)
        supervisor = create_gated_agent(
            made.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find"}))]),
            tools=[ask],
        )
        stream = supervisor.astream(INPUT, context=made.supervisor, stream_mode="custom", subgraphs=True)
        async for namespace, event in stream:
            assert namespace and event == {"started": "slow papers"}  # from inside the sub-agent
            break
        await stream.aclose()
        release.set()
        (_, child), *_ = made.gate.delegations
        assert _held(made.gate, made.supervisor.chain.root.id, child.grant_id) == 0
        assert ("tool:search", "error", ("CancelledError",)) in [
            (o.resource, o.status, o.reasons) for o in _outcomes(made.gate)
        ]
        _audit_complete(made.gate)
        await _both_slots_free(made, tool)
    finally:
        made.gate.close()


# --- approvals while streaming ---------------------------------------------------------------


def _interrupts(chunks: list[Any]) -> list[Interrupt]:
    """The interrupts a stream carried, in any of its shapes: ``{"__interrupt__": ...}``, or that
    under a mode name, a namespace, or both."""
    found: list[Interrupt] = []
    for chunk in chunks:
        while isinstance(chunk, tuple):
            chunk = chunk[-1]
        if isinstance(chunk, dict) and "__interrupt__" in chunk:
            found.extend(chunk["__interrupt__"])
    return found


def _asked(request: dict[str, Any]) -> dict[str, Any]:
    """What an approval request asks, without what tells two requests apart (its id, and its
    expiry, counted from when it was opened)."""
    return {k: v for k, v in request.items() if k not in ("id", "expires_at")}


async def _drain(agent: Any, value: Any, config: dict[str, Any], team: Team, way: str) -> list[Any]:
    """Run ``agent`` on ``value`` the ``way`` named, everything it streamed."""
    if way == "astream_events":
        return [
            e["data"]["chunk"]
            async for e in agent.astream_events(value, config, context=team.supervisor, version="v2")
            if e["event"] == "on_chain_stream" and not e["parent_ids"]
        ]
    mode: Any = way.removeprefix("a").split("+")
    if way.startswith("a"):
        return [c async for c in agent.astream(value, config, context=team.supervisor, stream_mode=mode)]
    return list(agent.stream(value, config, context=team.supervisor, stream_mode=mode))


@pytest.mark.parametrize(
    "way", ["updates", "values", "updates+messages", "aupdates", "avalues", "astream_events"]
)
async def test_approval_interrupt_in_the_stream_and_resume_through_it(team: Team, way: str) -> None:
    reference = _publisher(team.gate, InMemorySaver(), team)
    by_invoke = reference.invoke(INPUT, {"configurable": {"thread_id": "by-invoke"}}, context=team.supervisor)
    (expected,) = by_invoke["__interrupt__"]

    agent = _publisher(team.gate, InMemorySaver(), team)
    config = {"configurable": {"thread_id": "streamed"}}
    (pending,) = _interrupts(await _drain(agent, INPUT, config, team, way))
    assert pending.value["agentgate"] == "approval_required"
    request = pending.value["request"]
    # The same call asked in another thread has a request of its own (review R55: one shared
    # request let an approval given for one thread's interrupt run the call in the other), asking
    # the same of the same approvers
    assert request["id"] != expected.value["request"]["id"]
    assert _asked(request) == _asked(expected.value["request"])
    assert request["resource"] == "tool:publish" and request["approvers"] == ["dana"]
    assert request["requester"] == "supervisor" and request["args"] == {"path": "reports/final"}
    assert team.ran == []

    # Signed with Approval.sign: Gate.approve refuses a key that is no approver (review R71).
    wrong = Approval.sign(pending.value, team.keys["researcher"]).to_dict()
    (again,) = _interrupts(await _drain(agent, Command(resume=wrong), config, team, way))
    assert again.value["request"]["id"] == request["id"] and team.ran == []

    approval = team.gate.approve(again.value, team.keys["dana"])
    assert _interrupts(await _drain(agent, Command(resume=approval), config, team, way)) == []
    assert team.ran == ["publish:reports/final"]
    assert agent.get_state(config).interrupts == ()
    allowed = [e for e in _entries(team.gate) if e.kind == "allow" and e.resource == "tool:publish"]
    assert [e.approver for e in allowed] == [team.keys["dana"].did]
    _audit_complete(team.gate)


async def test_deny_resume_through_astream_refuses_the_call(team: Team) -> None:
    agent = _publisher(team.gate, InMemorySaver(), team)
    config = {"configurable": {"thread_id": "deny"}}
    assert len(_interrupts(await _drain(agent, INPUT, config, team, "aupdates"))) == 1
    chunks = await _drain(agent, Command(resume="deny"), config, team, "aupdates")
    assert _interrupts(chunks) == []
    refused = [
        m
        for _, c in chunks
        for u in c.values()
        for m in (u or {}).get("messages", [])
        if isinstance(m, ToolMessage)
    ]
    assert [m.status for m in refused] == ["error"] and team.ran == []
    entries = _entries(team.gate)
    (asked,) = [e for e in entries if e.kind == "approval_required"]
    assert [e.ref for e in entries if e.kind == "deny" and e.resource == "tool:publish"] == [asked.index]
    assert team.gate.verify().first_bad_index is None


# --- sub-agents under subgraphs=True ---------------------------------------------------------


def _delegating(team: Team) -> Any:
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))])
    return create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask], checkpointer=InMemorySaver()
    )


def _decisions(gate: Gate) -> list[tuple[str, str | None, str | None]]:
    kinds = ("allow", "deny", "outcome", "approval_required", "approval_given")
    return sorted((e.kind, e.resource, e.status) for e in _entries(gate) if e.kind in kinds)


async def _delegated_run(team: Team, way: str) -> set[tuple[str, ...]]:
    """Run the delegating supervisor to its sub-agent's approval and on to its end, the ``way``
    named; the namespaces its stream carried."""
    supervisor = _delegating(team)
    config = {"configurable": {"thread_id": way}}
    kw: dict[str, Any] = {"context": team.supervisor}
    seen: list[Any] = []
    for value in (INPUT, None):
        if value is None:
            (pending,) = supervisor.get_state(config).interrupts
            assert pending.value["request"]["requester"] == "researcher"
            assert team.ran == ["search:papers"]
            value = Command(resume=team.gate.approve(pending.value, team.keys["dana"]))
        if way == "invoke":
            supervisor.invoke(value, config, **kw)
        elif way == "stream":
            seen += supervisor.stream(value, config, stream_mode="updates", subgraphs=True, **kw)
        elif way == "astream":
            seen += [
                c
                async for c in supervisor.astream(value, config, stream_mode="updates", subgraphs=True, **kw)
            ]
        else:
            seen += [e async for e in supervisor.astream_events(value, config, version="v2", **kw)]
    assert team.ran == ["search:papers", "publish:reports/x"]
    assert len(team.gate.delegations) == 1
    assert supervisor.get_state(config).interrupts == ()
    return {c[0] for c in seen if isinstance(c, tuple)}


@pytest.mark.parametrize("way", ["stream", "astream", "astream_events"])
async def test_sub_agent_streamed_with_subgraphs_decides_as_under_invoke(tmp_path: Path, way: str) -> None:
    teams = []
    for name in ("invoke", way):
        (tmp_path / name).mkdir()
        teams.append(_make_team(tmp_path / name))
    try:
        await _delegated_run(teams[0], "invoke")
        namespaces = await _delegated_run(teams[1], way)
        if way != "astream_events":
            assert () in namespaces and any(n and n[0].startswith("tools:") for n in namespaces)
        assert _decisions(teams[1].gate) == _decisions(teams[0].gate)
        for made in teams:
            _audit_complete(made.gate)
    finally:
        for made in teams:
            made.gate.close()


async def test_no_stream_mode_carries_a_grant_token_or_a_key(team: Team) -> None:
    supervisor = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(
            turns=[_calls(("ask_researcher", {"task": "t"}), ("search", {"query": "q"}))]
        ),
        tools=[_ask_researcher(team), *_tools(team)],
        checkpointer=InMemorySaver(),
    )
    dumped = [
        repr(e)
        async for e in supervisor.astream_events(
            INPUT, {"configurable": {"thread_id": "events"}}, context=team.supervisor, version="v2"
        )
    ]
    modes = ["debug", "checkpoints", "tasks", "values", "updates", "messages"]
    for mode in modes:
        config = {"configurable": {"thread_id": mode}}
        chunks = supervisor.astream(INPUT, config, context=team.supervisor, stream_mode=mode, subgraphs=True)
        dumped += [repr(c) async for c in chunks]
    assert len(team.gate.delegations) == 1 + len(modes) and team.ran.count("search:papers") == 1 + len(modes)
    secrets = [
        team.supervisor.chain.token,
        team.keys["supervisor"].seed.hex(),
        team.keys["researcher"].seed.hex(),
    ]
    secrets += [child.chain.token for _, child in team.gate.delegations]
    text = "\n".join(dumped)
    assert not [s for s in secrets if s in text]


# --- defects ---------------------------------------------------------------------------------


def test_a_request_asked_again_has_the_payload_it_was_first_asked_with(team: Team) -> None:
    first = _publisher(team.gate, InMemorySaver(), team)
    asked = first.invoke(INPUT, {"configurable": {"thread_id": "first"}}, context=team.supervisor)
    again = _publisher(team.gate, InMemorySaver(), team).invoke(
        INPUT, {"configurable": {"thread_id": "again"}}, context=team.supervisor
    )
    first_payload, again_payload = asked["__interrupt__"][0].value, again["__interrupt__"][0].value
    # Another thread's request is its own (review R55), and asks what the first did
    assert first_payload["request"]["id"] != again_payload["request"]["id"]
    assert {**first_payload, "request": _asked(first_payload["request"])} == {
        **again_payload,
        "request": _asked(again_payload["request"]),
    }


@pytest.mark.parametrize("way", ["stream", "astream"])
async def test_model_stream_cut_after_output_was_delivered_is_charged(team: Team, way: str) -> None:
    # Under invoke the same failing model delivers nothing and is released: nothing to charge.
    chat = StreamedChatModel(turns=[AIMessage(content="one two three four five six")], cut_after=3)
    agent = create_gated_agent(team.gate, name="supervisor", model=chat, tools=_tools(team))
    with pytest.raises(ConnectionError):
        agent.invoke(INPUT, context=team.supervisor)
    assert _spent(team) == 0

    delivered: list[str] = []
    with pytest.raises(ConnectionError):
        if way == "stream":
            for chunk, _ in agent.stream(INPUT, context=team.supervisor, stream_mode="messages"):
                delivered.append(str(chunk.content))
        else:
            async for chunk, _ in agent.astream(INPUT, context=team.supervisor, stream_mode="messages"):
                delivered.append(str(chunk.content))
    assert delivered == ["one ", "two ", "three "]  # the consumer got (and the provider billed) output
    streamed = _outcomes(team.gate)[-1]
    assert streamed.status == "error" and streamed.reasons[0] == "ConnectionError"
    assert _spent(team) > 0  # today: 0, the reservation released as for a call that produced nothing
    _audit_complete(team.gate)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    from agentgate.sim import SimServer

    server = SimServer(model_name="scripted", time_scale=0.05).start()
    try:
        yield server.url
    finally:
        server.stop()


def test_chat_openai_streamed_through_the_middleware_is_charged_its_reported_usage(
    tmp_path: Path, sim_url: str
) -> None:
    from langchain_openai import ChatOpenAI

    spent: dict[str, int] = {}
    for way in ("invoke", "messages"):
        (tmp_path / way).mkdir()
        made = _make_team(tmp_path / way)
        try:
            model = ChatOpenAI(
                model="scripted",
                base_url=sim_url + "/v1",
                api_key="sk-loopback",
                max_tokens=16,
                max_retries=0,
            )
            agent = create_gated_agent(made.gate, name="supervisor", model=model, tools=_tools(made))
            if way == "invoke":
                agent.invoke(INPUT, context=made.supervisor)
            else:
                chunks = list(agent.stream(INPUT, context=made.supervisor, stream_mode="messages"))
                assert len(chunks) > 2  # it really streamed, token by token
            (outcome,) = _outcomes(made.gate)
            assert outcome.status == "ok"
            assert "no usage was reported; charged as reserved" not in outcome.reasons
            spent[way] = _spent(made)
        finally:
            made.gate.close()
    assert spent["messages"] == spent["invoke"]


def test_dispatched_model_streams_its_tokens(team: Team, sim_url: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.dispatcher import Dispatcher
    from agentgate.dispatch.router import Router

    backend = {"name": "sim-0", "url": sim_url, "engine": "vllm", "models": ["scripted"]}
    inventory = inventory_from_mapping({"backends": [{**backend, "metrics_url": sim_url + "/metrics"}]})
    team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
    own = GenericFakeChatModel(messages=iter([]))  # raises if the agent's own model were called
    agent = create_gated_agent(
        team.gate, name="supervisor", model=own, tools=_tools(team), model_name="scripted", max_tokens=16
    )
    chunks = [m for m, _ in agent.stream(INPUT, context=team.supervisor, stream_mode="messages")]
    answer = chunks[-1]
    assert answer.response_metadata.get("backend") == "sim-0" or any(
        c.response_metadata.get("backend") == "sim-0" for c in chunks
    )
    # 16 tokens generated: a streaming consumer sees them arrive, not one message at the end.
    assert len(chunks) > 2
    _audit_complete(team.gate)
