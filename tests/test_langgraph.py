"""The LangGraph integration with the real langgraph/langchain packages: every rule is a run of an agent."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
import test_langgraph_time_travel as timetravel
from _raw_sqlite import opened
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.types import Command
from pydantic import BaseModel
from test_audit_reconciliation import _read
from test_observability import Sweep
from test_observability_gate_spans import _team

from agentgate.audit.entry import argument_digest
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.integrations.langgraph import (
    ScriptedChatModel,
    create_gated_agent,
    delegation_tool,
    gated_tool_node,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

NAMES = ("root", "supervisor", "researcher", "dana")


def _policy_text(dids: dict[str, str], budget: int, unit: str = "usd_micros") -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{dids["root"]}"}}
tenants:
  lab: {{}}
principals:
  supervisor: {{kind: agent, did: "{dids["supervisor"]}", tenant: lab, roles: [supervisor]}}
  researcher: {{kind: agent, did: "{dids["researcher"]}", tenant: lab, roles: [researcher]}}
  dana: {{kind: human, did: "{dids["dana"]}", tenant: lab, roles: [owner]}}
tools:
  search:
    args: {{query: {{type: string, required: true}}}}
    idempotent: true
    concurrency: 2
    loggable: [query]
  publish:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
  shell:
    args: {{cmd: {{type: string, required: true}}}}
  ask_stowaway:
    args: {{task: {{type: string, required: true}}}}
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  supervisor:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:publish
        constraints: {{path: {{prefix: "reports/"}}}}
      - resource: tool:ask_stowaway
      - resource: model:scripted
    budget: {{limit: {budget}, unit: {unit}}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:search
        - resource: tool:publish
        - resource: model:scripted
  researcher:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:publish
      - resource: model:scripted
    ttl_s: 1800
  owner:
    kind: human
    capabilities:
      - resource: tool:publish
    ttl_s: 3600
approvals:
  publish:
    resource: tool:publish
    approvers: [dana]
    expiry_s: 600
"""


@dataclass
class Team:
    gate: Gate
    keys: dict[str, SigningKey]
    supervisor: AgentIdentity
    path: Path
    ran: list[str]

    def reopen(self) -> Gate:
        """A new gate over the same store and policy, as after a process restart."""
        self.gate.close()
        self.gate = Gate(self.gate.policy, SQLiteStore(self.path / "agentgate.db"))
        return self.gate


def _make_team(tmp_path: Path, budget: int = 1_000_000, unit: str = "usd_micros") -> Team:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, budget, unit), source="team.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    return Team(gate, keys, supervisor, tmp_path, [])


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def _tools(team: Team) -> list[BaseTool]:
    def search(query: str) -> str:
        team.ran.append(f"search:{query}")
        return f"results for {query}"

    def publish(path: str) -> str:
        team.ran.append(f"publish:{path}")
        return f"published {path}"

    def shell(cmd: str) -> str:
        team.ran.append(f"shell:{cmd}")
        return "ran"

    return [
        StructuredTool.from_function(func=f, name=f.__name__, description=f"{f.__name__} tool")
        for f in (search, publish, shell)
    ]


def _calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": n, "args": a, "id": f"{n}-{i}"} for i, (n, a) in enumerate(calls)]
    )


def _tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _entries(gate: Gate) -> list[Any]:
    gate.flush()
    return list(gate.audit.entries())


def test_allowed_call_runs_and_refused_call_becomes_an_error_message(team: Team) -> None:
    model = ScriptedChatModel(
        turns=[_calls(("search", {"query": "kv cache"}), ("shell", {"cmd": "rm -rf /"}))]
    )
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))

    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)

    by_name = {m.name: m for m in _tool_messages(result)}
    assert by_name["search"].status == "success"
    assert by_name["shell"].status == "error"
    assert "tool:shell" in str(by_name["shell"].content) and "refused" in str(by_name["shell"].content)
    assert team.ran == ["search:kv cache"]
    kinds = [(e.kind, e.resource) for e in _entries(team.gate)]
    assert ("deny", "tool:shell") in kinds and ("allow", "tool:search") in kinds
    assert ("allow", "model:scripted") in kinds
    assert team.gate.verify().first_bad_index is None


def test_identity_never_reaches_state_or_messages(team: Team) -> None:
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    dumped = repr(result)
    assert team.supervisor.chain.token not in dumped
    assert team.keys["supervisor"].seed.hex() not in dumped
    assert set(result) == {"messages"}


def test_run_without_identity_is_refused(team: Team) -> None:
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=_tools(team), gate_models=False
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    (message,) = _tool_messages(result)
    assert message.status == "error" and "no_chain" in str(message.content)
    assert team.ran == []


def test_enforce_raises_denied(team: Team) -> None:
    model = ScriptedChatModel(turns=[_calls(("shell", {"cmd": "id"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team), enforce=True)
    with pytest.raises(Denied):
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    assert team.ran == []


def _peak_tools(team: Team, delay: float) -> tuple[BaseTool, BaseTool, dict[str, int]]:
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def enter() -> None:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])

    def leave() -> None:
        with lock:
            state["now"] -= 1

    def search(query: str) -> str:
        enter()
        time.sleep(delay)
        leave()
        team.ran.append(query)
        return query

    async def asearch(query: str) -> str:
        enter()
        await asyncio.sleep(delay)
        leave()
        team.ran.append(query)
        return query

    sync_tool = StructuredTool.from_function(func=search, name="search", description="search")
    async_tool = StructuredTool.from_function(coroutine=asearch, name="search", description="search")
    return sync_tool, async_tool, state


def test_parallel_tool_calls_respect_the_concurrency_limit_sync(team: Team) -> None:
    sync_tool, _, state = _peak_tools(team, 0.1)
    model = ScriptedChatModel(turns=[_calls(*[("search", {"query": f"q{i}"}) for i in range(6)])])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[sync_tool])
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["success"] * 6
    assert sorted(team.ran) == [f"q{i}" for i in range(6)]
    assert 1 <= state["peak"] <= 2


async def test_parallel_tool_calls_respect_the_concurrency_limit_async(team: Team) -> None:
    _, async_tool, state = _peak_tools(team, 0.1)
    model = ScriptedChatModel(turns=[_calls(*[("search", {"query": f"q{i}"}) for i in range(6)])])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[async_tool])
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["success"] * 6
    assert 1 <= state["peak"] <= 2  # never above the policy's concurrency: 2 (6 would run at once without it)


async def test_gated_tool_node_in_a_hand_built_graph_holds_limits_async(team: Team) -> None:
    _, async_tool, state = _peak_tools(team, 0.1)
    node = gated_tool_node(team.gate, [async_tool], agent="supervisor")
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    message = _calls(*[("search", {"query": f"q{i}"}) for i in range(5)])
    result = await app.ainvoke({"messages": [message]}, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["success"] * 5
    assert 1 <= state["peak"] <= 2  # never above the policy's concurrency: 2 (6 would run at once without it)


def _researcher(team: Team) -> Any:
    model = ScriptedChatModel(
        turns=[_calls(("search", {"query": "papers"}), ("publish", {"path": "reports/x"}))]
    )
    return create_gated_agent(team.gate, name="researcher", model=model, tools=_tools(team))


def _ask_researcher(
    team: Team,
    agent: Any = None,
    capabilities: Sequence[str] = ("tool:search", "model:scripted"),
    **extra: Any,
) -> BaseTool:
    """The supervisor's tool that delegates to ``agent`` (``_researcher`` by default) for 5 minutes."""
    return delegation_tool(
        team.gate,
        name="researcher",
        agent=_researcher(team) if agent is None else agent,
        key=team.keys["researcher"],
        capabilities=list(capabilities),
        ttl=timedelta(minutes=5),
        **extra,
    )


def test_sub_agent_runs_on_a_fresh_attenuated_grant_of_its_own(team: Team) -> None:
    ask = _ask_researcher(team, budget=50_000)
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask])

    result = supervisor.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)

    assert _tool_messages(result)[0].status == "success"
    # The researcher searched; its publish call was outside what the supervisor handed on.
    assert team.ran == ["search:papers"]
    entries = _entries(team.gate)
    researcher_did = team.keys["researcher"].did
    theirs = [e for e in entries if e.principal == researcher_did]
    assert {(e.kind, e.resource) for e in theirs} >= {("allow", "tool:search"), ("deny", "tool:publish")}
    (parent, child), *_ = team.gate.delegations
    assert parent == "supervisor" and {e.chain_hash for e in theirs} == {child.grant_id}
    assert child.grant_id in team.gate.grants.descendants(team.supervisor.grant_id)
    chain = child.chain
    assert chain.root.id == team.supervisor.chain.root.id and len(chain.links) == 2
    assert chain.tip.audience == researcher_did
    assert chain.tip.expires <= int(time.time()) + 300
    assert chain.tip.budget is not None and chain.tip.budget.amount == 50_000


def test_delegation_wider_than_the_policy_allows_is_refused_and_the_sub_agent_never_runs(team: Team) -> None:
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:shell"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask])
    result = supervisor.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    (message,) = _tool_messages(result)
    assert message.status == "error" and "hand on tool:shell" in str(message.content)
    assert team.ran == [] and team.gate.delegations == []
    refused = [e for e in _entries(team.gate) if e.resource == "agent:researcher"]
    assert [e.kind for e in refused] == ["deny"]
    assert "scope_creep:delegation_wider_than_policy" in refused[0].reasons


def test_nested_agent_without_a_grant_cannot_run_tools(team: Team) -> None:
    researcher = _researcher(team)

    def ask_stowaway(task: str) -> str:
        # The classic mistake: invoking a nested agent inside a tool, so that LangGraph hands it
        # the parent's whole run context.
        out = researcher.invoke({"messages": [{"role": "user", "content": task}]})
        return str(out["messages"][-1].content)

    tool = StructuredTool.from_function(func=ask_stowaway, name="ask_stowaway", description="nested")
    model = ScriptedChatModel(turns=[_calls(("ask_stowaway", {"task": "go"}))])
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[tool])

    supervisor.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)

    assert team.ran == []
    refused = [e for e in _entries(team.gate) if "implicit_trust_inheritance:inherited_identity" in e.reasons]
    assert {e.resource for e in refused} >= {"model:scripted"}


def test_nested_agent_tool_calls_refused_with_implicit_trust_inheritance(team: Team) -> None:
    researcher = create_gated_agent(
        team.gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "papers"}))]),
        tools=_tools(team),
        gate_models=False,
    )
    out = researcher.invoke({"messages": [{"role": "user", "content": "x"}]}, context=team.supervisor)
    (message,) = _tool_messages(out)
    assert message.status == "error" and "implicit_trust_inheritance" in str(message.content)
    assert team.ran == []


def test_revoked_grant_stops_the_next_call_of_a_running_agent(team: Team) -> None:
    def search(query: str) -> str:
        team.gate.revoke(team.supervisor, reason=f"leaked while running {query}")
        return "revoked"

    revoker = StructuredTool.from_function(func=search, name="search", description="search")
    model = ScriptedChatModel(
        turns=[_calls(("search", {"query": "first"})), _calls(("publish", {"path": "reports/a"}))]
    )
    agent = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[revoker, *_tools(team)[1:]], gate_models=False
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    first, second = _tool_messages(result)
    assert first.status == "success"
    assert second.status == "error" and "revoked" in str(second.content)
    assert team.ran == []
    assert [e.kind for e in _entries(team.gate) if e.kind == "revoke"] == ["revoke"]


def test_budget_exhaustion_ends_the_run_gracefully(tmp_path: Path) -> None:
    made = _make_team(tmp_path, budget=400)
    try:
        turns = [_calls(("search", {"query": f"q{i}"})) for i in range(20)]
        agent = create_gated_agent(
            made.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=turns),
            tools=_tools(made),
            max_tokens=40,
        )
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]},
            context=made.supervisor,
            config={"recursion_limit": 100},
        )
        last = result["messages"][-1]
        assert isinstance(last, AIMessage) and not last.tool_calls
        assert "budget exhausted" in str(last.content) and "of 400 usd_micros spent" in str(last.content)
        assert 0 < len(made.ran) < 20
        spent, limit = made.gate.budget_usage(made.supervisor)[made.supervisor.chain.root.id]
        assert spent <= limit == 400
    finally:
        made.gate.close()


def _publisher(gate: Gate, checkpointer: Any, team: Team, path: str = "reports/final") -> Any:
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": path}))])
    return create_gated_agent(
        gate, name="supervisor", model=model, tools=_tools(team), checkpointer=checkpointer, gate_models=False
    )


def test_approval_pauses_and_resumes_with_a_signed_approval(team: Team) -> None:
    agent = _publisher(team.gate, InMemorySaver(), team)
    config = {"configurable": {"thread_id": "t1"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor)
    (pending,) = paused["__interrupt__"]
    request = pending.value["request"]
    assert request["resource"] == "tool:publish" and request["approvers"] == ["dana"]
    assert request["requester"] == "supervisor" and request["args"] == {"path": "reports/final"}
    assert team.ran == []

    # The requester cannot approve its own call; nor can someone the policy does not name (signed
    # with Approval.sign: Gate.approve refuses both keys since review R71).
    for wrong in (team.keys["supervisor"], team.keys["researcher"]):
        again = agent.invoke(
            Command(resume=Approval.sign(pending.value, wrong).to_dict()), config, context=team.supervisor
        )
        assert "__interrupt__" in again and team.ran == []
        pending = again["__interrupt__"][0]

    approval = team.gate.approve(pending.value, team.keys["dana"])
    done = agent.invoke(Command(resume=approval), config, context=team.supervisor)
    assert "__interrupt__" not in done
    assert team.ran == ["publish:reports/final"]
    allowed = [e for e in _entries(team.gate) if e.kind == "allow" and e.resource == "tool:publish"]
    assert [e.approver for e in allowed] == [team.keys["dana"].did]


def test_approval_is_single_use_and_bound_to_the_call(team: Team) -> None:
    first = _publisher(team.gate, InMemorySaver(), team)
    config = {"configurable": {"thread_id": "a"}}
    paused = first.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor)
    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    first.invoke(Command(resume=approval), config, context=team.supervisor)
    assert team.ran == ["publish:reports/final"]

    # The same approval replayed for another run of the same call (another thread): not counted
    # there, asked again (until review R55 the threads shared the request, and it was refused
    # as already used there; an approval still pending in thread a would have run the call here).
    replay = {"configurable": {"thread_id": "b"}}
    paused = first.invoke({"messages": [{"role": "user", "content": "go"}]}, replay, context=team.supervisor)
    again = first.invoke(Command(resume=approval), replay, context=team.supervisor)
    (asked,) = again["__interrupt__"]
    assert "another run" in str(asked.value["request"]["reasons"])
    assert team.ran == ["publish:reports/final"]

    # An approval for one call does not approve an edited call (other arguments).
    edited = _publisher(team.gate, InMemorySaver(), team, path="reports/other")
    config_c = {"configurable": {"thread_id": "c"}}
    paused = edited.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, config_c, context=team.supervisor
    )
    other = edited.invoke(Command(resume=approval), config_c, context=team.supervisor)
    assert "__interrupt__" in other and team.ran == ["publish:reports/final"]


def test_approval_resumes_after_a_restart_with_sqlite_saver(team: Team) -> None:
    db = team.path / "checkpoints.sqlite"
    config = {"configurable": {"thread_id": "restart"}}
    with opened(db, check_same_thread=False) as conn:
        agent = _publisher(team.gate, SqliteSaver(conn), team)
        paused = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
        )
        payload = paused["__interrupt__"][0].value

    gate = team.reopen()  # a new process: new gate, new saver, same files
    approval = gate.approve(payload, team.keys["dana"])
    with opened(db, check_same_thread=False) as conn:
        agent = _publisher(gate, SqliteSaver(conn), team)
        done = agent.invoke(Command(resume=approval), config, context=team.supervisor)
    assert "__interrupt__" not in done
    assert team.ran == ["publish:reports/final"]
    assert gate.verify().first_bad_index is None


async def test_async_run_with_sub_agent_and_approval(team: Team) -> None:
    ask = _ask_researcher(team)
    model = ScriptedChatModel(
        turns=[_calls(("ask_researcher", {"task": "find"}), ("publish", {"path": "reports/final"}))]
    )
    agent = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask, *_tools(team)], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "async"}}
    paused = await agent.ainvoke(
        {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
    )
    assert team.ran == ["search:papers"]
    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    await agent.ainvoke(Command(resume=approval), config, context=team.supervisor)
    assert team.ran == ["search:papers", "publish:reports/final"]


@pytest.mark.postgres
def test_approval_resumes_after_a_restart_with_postgres_saver_and_store(
    tmp_path: Path, postgres_url: str
) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    from agentgate.store._postgres import PostgresStore

    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 1_000_000), source="team.yaml")
    log_key = SigningKey.generate()
    gate = Gate(policy, PostgresStore(postgres_url), log_key=log_key)
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    team = Team(gate, keys, supervisor, tmp_path, [])
    config = {"configurable": {"thread_id": "pg-restart"}}
    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
        paused = _publisher(gate, saver, team).invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=supervisor
        )
    payload = paused["__interrupt__"][0].value
    gate.close()

    gate = Gate(policy, PostgresStore(postgres_url), log_key=log_key)  # a new process
    try:
        with PostgresSaver.from_conn_string(postgres_url) as saver:
            done = _publisher(gate, saver, team).invoke(
                Command(resume=gate.approve(payload, keys["dana"])), config, context=supervisor
            )
        assert "__interrupt__" not in done
        assert team.ran == ["publish:reports/final"]
        assert gate.verify().ok
    finally:
        gate.close()


def test_model_calls_are_routed_through_the_dispatcher_to_a_backend(team: Team) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.dispatcher import Dispatcher
    from agentgate.dispatch.router import Router
    from agentgate.sim import SimServer

    server = SimServer(model_name="scripted", time_scale=0.1).start()
    try:
        backend = {"name": "sim-0", "url": server.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping(
            {"backends": [{**backend, "metrics_url": server.url + "/metrics"}]}
        )
        team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
        own = GenericFakeChatModel(messages=iter([]))  # raises if the agent's own model were called
        agent = create_gated_agent(
            team.gate, name="supervisor", model=own, tools=_tools(team), model_name="scripted", max_tokens=16
        )
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "summarize"}]}, context=team.supervisor
        )
        answer = result["messages"][-1]
        assert answer.response_metadata["backend"] == "sim-0" and server.served == 1
        usage = answer.usage_metadata
        assert usage is not None and 0 < usage["output_tokens"] <= 16
        # 1 micro-dollar per token at this policy's price: the budget is charged what the backend reported.
        spent, _ = team.gate.budget_usage(team.supervisor)[team.supervisor.chain.root.id]
        assert spent == usage["input_tokens"] + usage["output_tokens"]
    finally:
        server.stop()


def test_sub_agent_approval_pauses_the_supervisor_and_resumes_on_the_same_grant(team: Team) -> None:
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))])
    supervisor = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "nested-approval"}}
    paused = supervisor.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
    )
    (pending,) = paused["__interrupt__"]
    assert pending.value["request"]["requester"] == "researcher"
    assert team.ran == ["search:papers"]
    approval = team.gate.approve(pending.value, team.keys["dana"])
    done = supervisor.invoke(Command(resume=approval), config, context=team.supervisor)
    assert "__interrupt__" not in done
    assert team.ran == ["search:papers", "publish:reports/x"]
    assert len(team.gate.delegations) == 1


def test_a_failing_tool_becomes_an_error_message_without_its_secret_text(team: Team) -> None:
    def search(query: str) -> str:
        raise RuntimeError("db password is hunter2")

    broken = StructuredTool.from_function(func=search, name="search", description="search")
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"})), _calls(("shell", {"cmd": "ls"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[broken], gate_models=False)
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    failed = _tool_messages(result)[0]
    assert failed.status == "error" and "RuntimeError" in str(failed.content)
    assert "hunter2" not in repr(result)
    assert len(_tool_messages(result)) == 2  # the run went on to the next turn
    outcome = [e for e in _entries(team.gate) if e.kind == "outcome" and e.resource == "tool:search"]
    assert [(e.status, e.reasons) for e in outcome] == [("error", ("RuntimeError",))]


def test_an_exhausted_tool_call_budget_ends_the_run_too(tmp_path: Path) -> None:
    made = _make_team(tmp_path, budget=3, unit="calls")
    try:
        turns = [_calls(("search", {"query": f"q{i}"})) for i in range(10)]
        agent = create_gated_agent(
            made.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=turns),
            tools=_tools(made),
            gate_models=False,
        )
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=made.supervisor)
        assert made.ran == ["search:q0", "search:q1", "search:q2"]
        last = result["messages"][-1]
        assert isinstance(last, AIMessage) and not last.tool_calls
        assert "budget exhausted (3 of 3 calls spent" in str(last.content)
        assert len(_tool_messages(result)) == 4  # three ran, the fourth was refused, then the run ended
    finally:
        made.gate.close()


def test_runs_on_fresh_framework_threads_do_not_pile_up_store_connections(team: Team) -> None:
    import os

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    sync_tool, _, _ = _peak_tools(team, 0.0)
    turns = [_calls(*[("search", {"query": f"q{i}"}) for i in range(4)]), _calls(("search", {"query": "z"}))]
    agent = create_gated_agent(
        team.gate, name="supervisor", model=ScriptedChatModel(turns=turns), tools=[sync_tool]
    )
    agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    before = open_files()
    for _ in range(5):  # LangGraph runs each invoke's tool calls on threads it makes for that run
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    assert open_files() - before <= 2


async def test_a_sync_tool_past_its_timeout_under_ainvoke_answers_with_its_result(tmp_path: Path) -> None:
    """R15: under ainvoke a sync tool runs in a worker thread that no cancellation stops. Past its
    timeout it ran to its end (a refund went through) but the model was told it failed, and the
    outcome said ``error``: a model may then ask again under a new call id (a second refund).
    Under ``invoke`` the same tool's result is returned. It now is under ``ainvoke`` too."""
    ran: list[str] = []

    def search(query: str) -> str:
        time.sleep(0.5)
        ran.append(query)
        return "found"

    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    gate = Gate(
        parse_policy(
            text.replace("concurrency: 2", "concurrency: 1\n    timeout_s: 0.1"), source="team.yaml"
        ),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    try:
        identity = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        tool = StructuredTool.from_function(func=search, name="search", description="search")
        model = ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))])
        agent = create_gated_agent(gate, name="supervisor", model=model, tools=[tool], gate_models=False)
        result = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, context=identity)
        answers = [m for m in result["messages"] if m.type == "tool"]
        assert ran == ["q"]
        assert [(m.status, m.content) for m in answers] == [("success", "found")]
        assert [e.status for e in _entries(gate) if e.kind == "outcome"] == ["ok"]
    finally:
        gate.close()


def test_a_delegation_span_links_to_the_audit_entry_of_the_grant_it_made(tmp_path: Path) -> None:
    """``Gate.delegate`` audits every delegation (an ``allow`` entry for ``agent:NAME``), and
    docs/operations.md says the decision is on the span with ``agentgate.audit.index``, "the
    signed audit entry it links to". The trace of a delegation is joined to its evidence by the
    ``delegate agent:helper`` span; the ``execute_tool ask_helper`` span that holds it carries no
    decision of its own since review R54 (one span per audited decision: it carried the same
    decision and index, so a delegation counted by span was counted twice)."""
    sweep = Sweep(tmp_path)
    try:
        _team(sweep).invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
        spans = sweep.exporter.get_finished_spans()
        (made,) = [s for s in spans if s.name == "delegate agent:helper"]
        (tool,) = [s for s in spans if s.name == "execute_tool ask_helper"]
        assert made.attributes is not None and made.attributes["agentgate.decision"] == "allow"
        delegated = [e.index for e in sweep.gate.audit.entries() if e.resource == "agent:helper"]
        assert delegated and made.attributes.get("agentgate.audit.index") == delegated[0]
        assert not {"agentgate.decision", "agentgate.audit.index"} & set(tool.attributes or {})
    finally:
        sweep.gate.close()


GO = {"messages": [{"role": "user", "content": "go"}]}


def _team_gate(
    path: Path, edit: Callable[[str], str] = str, *, budget: int = 1_000_000, unit: str = "usd_micros"
) -> tuple[Gate, dict[str, SigningKey], AgentIdentity]:
    """A gate over test_langgraph's team policy (``edit`` applied to its text) on a SQLite file,
    its keys, and the supervisor's identity."""
    keys = {n: SigningKey.generate() for n in NAMES}
    text = edit(_policy_text({n: k.did for n, k in keys.items()}, budget, unit))
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(path))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    return gate, keys, supervisor


async def test_a_tool_call_cancelled_while_it_waited_for_a_slot_runs_when_the_thread_is_resumed(
    tmp_path: Path,
) -> None:
    # search is not idempotent here, with a concurrency of 2. Three parallel calls: two run and
    # hold both slots, the third waits for one. The run is cancelled. The third call never
    # started, yet its once-only key is marked "error" (ran and failed), so resuming the thread
    # refuses it: "already ran and failed ... it may have had its effect", and `agentgate tasks
    # unsettled` lists it for a person to settle.
    gate, _, supervisor = _team_gate(
        tmp_path / "agentgate.db", lambda text: text.replace("idempotent: true", "idempotent: false")
    )
    ran: list[str] = []
    hold = asyncio.Event()

    async def search(query: str) -> str:
        ran.append(query)
        await hold.wait()
        return f"results for {query}"

    tool = StructuredTool.from_function(coroutine=search, name="search", description="search")
    try:
        agent = create_gated_agent(
            gate,
            name="supervisor",
            model=ScriptedChatModel(
                turns=[
                    _calls(
                        ("search", {"query": "a"}), ("search", {"query": "b"}), ("search", {"query": "late"})
                    )
                ]
            ),
            tools=[tool],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )
        config = {"configurable": {"thread_id": "t"}}
        task = asyncio.create_task(agent.ainvoke(GO, config, context=supervisor))
        while len(ran) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # "late" is queued for a slot
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hold.set()
        assert len(ran) == 2
        (waited,) = {"a", "b", "late"} - set(ran)
        resumed = await agent.ainvoke(None, config, context=supervisor)
        answers = {m.tool_call_id: str(m.content)[:120] for m in _tool_messages(resumed)}
        assert waited in ran[2:], answers  # the call that never started runs when resumed
        assert [e.status for e in _entries(gate) if e.kind == "outcome"].count("ok") == 1
    finally:
        gate.close()


_CRASHING_SUB_AGENT = """
import asyncio, json, os, sys
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_langgraph import NAMES, _calls, _policy_text
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from agentgate.authority import parse_chain
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

stage, d = sys.argv[1], Path(sys.argv[2])

async def pay(query: str) -> str:
    with open(d / "effects.txt", "a") as f:
        f.write(query + "\\n")
    if stage == "first":
        os._exit(3)  # the process dies after the effect, before the tool's result is saved
    return "paid"

async def main() -> None:
    if stage == "first":
        keys = {n: SigningKey.generate() for n in NAMES}
        (d / "keys.json").write_text(json.dumps({n: k.seed.hex() for n, k in keys.items()}))
    else:
        seeds = json.loads((d / "keys.json").read_text())
        keys = {n: SigningKey(bytes.fromhex(s)) for n, s in seeds.items()}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace("idempotent: true", "idempotent: false")
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(d / "agentgate.db"))
    if stage == "first":
        sup = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        (d / "chain.txt").write_text(sup.chain.token)
    else:
        sup = AgentIdentity("supervisor", keys["supervisor"], parse_chain((d / "chain.txt").read_text()))
    tool = StructuredTool.from_function(coroutine=pay, name="search", description="search")
    researcher = create_gated_agent(
        gate, name="researcher", model=ScriptedChatModel(turns=[_calls(("search", {"query": "pay 100"}))]), tools=[tool]
    )
    ask = delegation_tool(
        gate, name="researcher", agent=researcher, key=keys["researcher"],
        capabilities=["tool:search", "model:scripted"], ttl=timedelta(minutes=5),
    )
    config = {"configurable": {"thread_id": "x"}}
    async with AsyncSqliteSaver.from_conn_string(str(d / "checkpoints.sqlite")) as saver:
        supervisor = create_gated_agent(
            gate, name="supervisor", model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "pay"}))]),
            tools=[ask], checkpointer=saver,
        )
        first = {"messages": [{"role": "user", "content": "go"}]} if stage == "first" else None
        await supervisor.ainvoke(first, config, context=sup, durability="sync")
    gate.close()

asyncio.run(main())
"""


def test_a_sub_agents_once_only_tool_does_not_run_again_after_a_crash_and_restart(tmp_path: Path) -> None:
    # A tool that is not idempotent runs at most once per tool call, "in this process and after a
    # restart alike" (docs/langgraph.md): the same call decided again after a crash is refused
    # (started, outcome never recorded). For a sub-agent it runs again: after the restart the
    # delegation tool hands the sub-agent a fresh grant, and the once-only key holds the grant
    # id, so the call resumed from the checkpoint is a new key and pays twice.
    script = tmp_path / "crash.py"
    script.write_text(_CRASHING_SUB_AGENT)
    tests = str(Path(__file__).resolve().parent)
    for stage, code in (("first", 3), ("second", 0)):
        done = subprocess.run(
            [sys.executable, str(script), stage, str(tmp_path), tests],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, done.stderr[-2000:]
    assert (tmp_path / "effects.txt").read_text().splitlines() == ["pay 100"]


async def test_an_approved_call_cancelled_while_it_waited_for_a_slot_keeps_its_approval(
    tmp_path: Path,
) -> None:
    # publish needs dana's approval and runs one at a time. An approved call waits for the slot
    # another publish holds; the client gives up (the run is cancelled). The call never started,
    # yet its approval stays consumed: resuming the thread replays the approval, which is
    # refused as "already used", and the model is told "Do not retry this call". A call that
    # pauses (interrupt() inside the tool) gets its approval put back (ApprovalStore.rearm); one
    # that never started should too.
    gate, keys, supervisor = _team_gate(
        tmp_path / "agentgate.db",
        lambda text: text.replace("    loggable: [path]", "    loggable: [path]\n    concurrency: 1"),
    )
    ran: list[str] = []
    hold = asyncio.Event()

    async def publish(path: str) -> str:
        ran.append(path)
        if path == "reports/busy":
            await hold.wait()
        return f"published {path}"

    tool = StructuredTool.from_function(coroutine=publish, name="publish", description="publish")

    def publisher(path: str) -> object:
        model = ScriptedChatModel(turns=[_calls(("publish", {"path": path}))])
        return create_gated_agent(
            gate,
            name="supervisor",
            model=model,
            tools=[tool],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )

    busy, agent = publisher("reports/busy"), publisher("reports/final")
    busy_config, config = {"configurable": {"thread_id": "busy"}}, {"configurable": {"thread_id": "t"}}
    try:
        paused = await busy.ainvoke(GO, busy_config, context=supervisor)  # type: ignore[attr-defined]
        approval = gate.approve(paused["__interrupt__"][0].value, keys["dana"])
        holding = asyncio.create_task(
            busy.ainvoke(Command(resume=approval), busy_config, context=supervisor)  # type: ignore[attr-defined]
        )
        while not ran:
            await asyncio.sleep(0.01)
        paused = await agent.ainvoke(GO, config, context=supervisor)  # type: ignore[attr-defined]
        approval = gate.approve(paused["__interrupt__"][0].value, keys["dana"])
        task = asyncio.create_task(agent.ainvoke(Command(resume=approval), config, context=supervisor))  # type: ignore[attr-defined]
        await asyncio.sleep(0.3)  # the approved call waits for publish's one slot
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hold.set()
        await holding
        resumed = await agent.ainvoke(None, config, context=supervisor)  # type: ignore[attr-defined]
        answers = [str(m.content)[:160] for m in _tool_messages(resumed)]
        assert ran == ["reports/busy", "reports/final"], answers
    finally:
        gate.close()


def test_a_refused_delegations_span_links_to_its_refusal(tmp_path: Path) -> None:
    """A delegation the policy refuses, asked through the LangGraph delegation tool, is audited
    (a ``deny`` on ``agent:NAME``), and one span links to that entry: its ``delegate agent:NAME``
    span, with ``agentgate.decision=deny``. Since review R54 the ``execute_tool ask_NAME`` span
    around it carries neither (it did, and a refused delegation counted by span counted twice)."""
    from datetime import timedelta

    from langchain_core.messages import AIMessage
    from test_observability import Sweep, _calls

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

    sweep = Sweep(tmp_path)
    try:
        helper = create_gated_agent(
            sweep.gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="x")]), tools=[]
        )
        ask = delegation_tool(
            sweep.gate,
            name="helper",
            agent=helper,
            key=sweep.keys["helper"],
            capabilities=["tool:vault"],  # beyond what the boss's delegation rule hands on
            ttl=timedelta(minutes=5),
        )
        model = ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "t"})), AIMessage(content="done")])
        boss = create_gated_agent(sweep.gate, name="boss", model=model, tools=[ask])
        boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
        sweep.gate.flush()
        entries = _read(sweep.gate.store)
        (refusal,) = [e for e in entries if e["kind"] == "deny" and e["resource"] == "agent:helper"]
        spans = sweep.exporter.get_finished_spans()
    finally:
        sweep.gate.close()
    linked = [s for s in spans if dict(s.attributes or {}).get("agentgate.audit.index") == refusal["index"]]
    assert [s.name for s in linked] == ["delegate agent:helper"]
    assert dict(linked[0].attributes or {}).get("agentgate.decision") == "deny"
    (tool,) = [s for s in spans if s.name == "execute_tool ask_helper"]
    assert "agentgate.decision" not in dict(tool.attributes or {})


def test_an_agents_model_calls_carry_its_thread_as_the_dispatchers_session(team: Team) -> None:
    # docs/dispatch.md: a session's (agent run's) backend is kept while it meets the SLO, so a
    # conversation's turns find their prefix in that backend's cache. Gate.dispatch passed no
    # session, so the product's own model calls never had affinity.
    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.dispatcher import Dispatcher
    from agentgate.dispatch.router import Router
    from agentgate.sim import SimServer

    server = SimServer(model_name="scripted", time_scale=0.1).start()
    try:
        backend = {"name": "sim-0", "url": server.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [backend]})
        router = Router(inventory)
        team.gate.attach_dispatcher(Dispatcher(inventory, router))
        model = ScriptedChatModel(turns=[_calls(("search", {"query": "kv"}))], served_by=team.gate)
        agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
        config = {"configurable": {"thread_id": "conversation-7"}}
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor)
        assert server.served == 2
        assert dict(router._sessions) == {"conversation-7": "sim-0"}
    finally:
        server.stop()


INPUT = {"messages": [{"role": "user", "content": "go"}]}


def _team_publisher(team: Team, checkpointer: Any = None, *, enforce: bool = False) -> Any:
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/final"}))])
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=model,
        tools=_tools(team),
        checkpointer=checkpointer,
        gate_models=False,
        enforce=enforce,
    )


def test_an_approval_gate_without_a_checkpointer_refuses_and_closes_the_request(team: Team) -> None:
    result = _team_publisher(team).invoke(INPUT, context=team.supervisor)
    assert "__interrupt__" not in result
    (refused,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert refused.status == "error" and "without a checkpointer" in str(refused.content)
    assert team.ran == []
    # Nothing is left for approvers to answer, and the log says how the request ended.
    assert team.gate.approvals.open_records() == []
    kinds = [(e.kind, e.resource) for e in _entries(team.gate) if e.resource == "tool:publish"]
    assert kinds == [("approval_required", "tool:publish"), ("deny", "tool:publish")]
    deny = next(e for e in _entries(team.gate) if e.kind == "deny")
    assert any("without a checkpointer" in r for r in deny.reasons)
    assert team.gate.verify().first_bad_index is None


def test_with_enforce_the_refusal_is_raised(team: Team) -> None:
    with pytest.raises(Denied, match="without a checkpointer"):
        _team_publisher(team, enforce=True).invoke(INPUT, context=team.supervisor)
    assert team.ran == [] and team.gate.approvals.open_records() == []


def test_with_a_checkpointer_the_run_still_pauses(team: Team) -> None:
    agent = _team_publisher(team, InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke(INPUT, config, context=team.supervisor)
    (pending,) = paused["__interrupt__"]
    done = agent.invoke(
        Command(resume=team.gate.approve(pending.value, team.keys["dana"])), config, context=team.supervisor
    )
    assert "__interrupt__" not in done and team.ran == ["publish:reports/final"]


def test_a_sub_agent_without_its_own_checkpointer_pauses_under_its_supervisors(team: Team) -> None:
    # The sub-agent (built by delegation_tool without a checkpointer) runs inside the supervisor's
    # run, whose checkpointer LangGraph lends it: its approval request pauses the whole run.
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))])
    supervisor = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask], checkpointer=InMemorySaver()
    )
    paused = supervisor.invoke(INPUT, {"configurable": {"thread_id": "n"}}, context=team.supervisor)
    assert paused["__interrupt__"][0].value["request"]["requester"] == "researcher"
    # ... and the same supervisor without a checkpointer: the sub-agent's call is refused at once.
    bare = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))]),
        tools=[ask],
    )
    result = bare.invoke(INPUT, context=team.supervisor)
    assert "__interrupt__" not in result
    denied = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "tool:publish"]
    assert [e.principal for e in denied] == [team.keys["researcher"].did]
    assert any("without a checkpointer" in r for r in denied[0].reasons)
    assert len(team.gate.approvals.open_records()) == 1  # the first run's, still waiting


INJECTED_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  report:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
  peek: {{}}
roles:
  worker:
    kind: agent
    capabilities:
      - {{resource: tool:report, constraints: {{path: {{prefix: "reports/"}}}}}}
      - {{resource: tool:peek}}
    budget: {{limit: 100, unit: calls}}
    ttl_s: 3600
"""


class ReportArgs(BaseModel):
    path: str
    state: Annotated[dict[str, Any], InjectedState]


class PeekArgs(BaseModel):
    state: Annotated[dict[str, Any], InjectedState]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_forged_injected_field_of_a_custom_schema_is_not_decided_on(tmp_path: Path, mode: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = INJECTED_POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="injected.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        seen: list[tuple[str, object]] = []

        def report(path: str, state: dict[str, Any]) -> str:
            seen.append((path, sorted(state)))
            return "ok"

        def peek(state: dict[str, Any]) -> str:
            seen.append(("peek", sorted(state)))
            return "ok"

        tools = [
            StructuredTool.from_function(func=report, name="report", description="r", args_schema=ReportArgs),
            StructuredTool.from_function(func=peek, name="peek", description="p", args_schema=PeekArgs),
        ]
        forged = {"forged": True}
        turn = AIMessage(
            content="",
            tool_calls=[
                {"name": "report", "args": {"path": "reports/q1", "state": forged}, "id": "r1"},
                {"name": "peek", "args": {"state": forged}, "id": "p1"},
            ],
        )
        graph = create_gated_agent(
            gate, name="agent", model=ScriptedChatModel(turns=[turn]), tools=tools, gate_models=False
        )
        if mode == "sync":
            out = graph.invoke(GO, context=agent)
        else:
            out = asyncio.run(graph.ainvoke(GO, context=agent))
        answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
        assert {k: m.status for k, m in answers.items()} == {"r1": "success", "p1": "success"}
        assert sorted(seen, key=repr) == sorted(
            [("reports/q1", ["messages"]), ("peek", ["messages"])], key=repr
        )  # the tools got the run's state, not the forgery
        gate.flush()
        allowed = {e.resource: e for e in gate.audit.entries() if e.kind == "allow"}
        assert allowed["tool:report"].args == {"path": "reports/q1"}
        assert allowed["tool:report"].args_digest == argument_digest({"path": "reports/q1"})
        assert allowed["tool:peek"].args_digest == argument_digest({})
        assert gate.verify().ok
    finally:
        gate.close()


def test_an_edit_that_appends_the_corrected_answer_closes_the_old_request(tmp_path: Path) -> None:
    rig = timetravel._rig(tmp_path)
    try:
        graph = timetravel._agent(rig, timetravel._turn(("publish", {"path": "reports/a"}, "pub-1")))
        config = timetravel._thread("edit-append")
        paused = graph.invoke(GO, config, context=rig.agent)
        corrected = AIMessage(
            content="", tool_calls=[{"name": "publish", "args": {"path": "reports/b"}, "id": "pub-1"}]
        )
        graph.update_state(config, {"messages": [corrected]}, as_node="model")  # appended: a new id
        old = rig.approve(paused["__interrupt__"][0].value)
        asked = graph.invoke(Command(resume=old), config, context=rig.agent)
        (again,) = asked["__interrupt__"]
        assert again.value["request"]["args"] == {"path": "reports/b"}  # the corrected call is asked
        done = graph.invoke(Command(resume=rig.approve(again.value)), config, context=rig.agent)
        assert "__interrupt__" not in done and rig.ran == ["publish:reports/b"]
        assert rig.pending_requests() == []  # the request for reports/a stays pending
    finally:
        rig.gate.close()
