"""The LangGraph integration with the real langgraph/langchain packages: every rule is a run of an agent."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
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
        spent, limit = made.gate.remaining(made.supervisor)[made.supervisor.chain.root.id]
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

    # The requester cannot approve its own call; nor can someone the policy does not name.
    for wrong in (team.keys["supervisor"], team.keys["researcher"]):
        again = agent.invoke(
            Command(resume=team.gate.approve(pending.value, wrong)), config, context=team.supervisor
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

    # The same approval replayed for another run of the same call: refused.
    replay = {"configurable": {"thread_id": "b"}}
    paused = first.invoke({"messages": [{"role": "user", "content": "go"}]}, replay, context=team.supervisor)
    again = first.invoke(Command(resume=approval), replay, context=team.supervisor)
    (refused,) = _tool_messages(again)
    assert refused.status == "error" and "already used" in str(refused.content)
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
    with sqlite3.connect(db, check_same_thread=False) as conn:
        agent = _publisher(team.gate, SqliteSaver(conn), team)
        paused = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
        )
        payload = paused["__interrupt__"][0].value
    conn.close()

    gate = team.reopen()  # a new process: new gate, new saver, same files
    approval = gate.approve(payload, team.keys["dana"])
    with sqlite3.connect(db, check_same_thread=False) as conn:
        agent = _publisher(gate, SqliteSaver(conn), team)
        done = agent.invoke(Command(resume=approval), config, context=team.supervisor)
    conn.close()
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
        spent, _ = team.gate.remaining(team.supervisor)[team.supervisor.chain.root.id]
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
